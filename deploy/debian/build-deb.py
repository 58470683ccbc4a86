#!/usr/bin/env python3
"""Builds the Debian package that [package.metadata.deb] in crates/server/Cargo.toml describes,
with dpkg-deb alone: the package `cargo deb -p meridian-server --no-build` makes, for machines
without cargo-deb (installing it from source costs minutes of CI; see deploy/README.md).

Usage: deploy/debian/build-deb.py [--binary PATH] [--out DIR]
Prints the path of the .deb it wrote (default: target/debian/meridian_<version>-1_<arch>.deb).
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRATE = ROOT / "crates" / "server"
RELEASE_BINARY = "target/release/meridian"


def shlib_depends(binary: pathlib.Path) -> str:
    """The shared-library dependencies of the binary, as cargo-deb's $auto finds them."""
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "debian").mkdir()
        (pathlib.Path(tmp) / "debian" / "control").write_text(
            "Source: meridian\n\nPackage: meridian\nArchitecture: any\n"
        )
        out = subprocess.run(
            ["dpkg-shlibdeps", "-O", str(binary)],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if out.returncode == 0 and "shlibs:Depends=" in out.stdout:
            return out.stdout.split("shlibs:Depends=", 1)[1].strip()
    return "libc6, libgcc-s1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=str(ROOT / RELEASE_BINARY))
    ap.add_argument("--out", default=str(ROOT / "target" / "debian"))
    args = ap.parse_args()

    cargo = tomllib.loads((CRATE / "Cargo.toml").read_text())
    meta = cargo["package"]["metadata"]["deb"]
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    binary = pathlib.Path(args.binary)
    if not binary.is_file():
        print(f"build-deb: {binary} does not exist (cargo build --release first)", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        stage = pathlib.Path(tmp) / "pkg"
        for src, dest, mode in meta["assets"]:
            src_path = binary if src == RELEASE_BINARY else CRATE / src
            dest_path = stage / (dest + src_path.name if dest.endswith("/") else dest)
            dest_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src_path, dest_path)
            os.chmod(dest_path, int(mode, 8))
        debian = stage / "DEBIAN"
        debian.mkdir()
        scripts = (CRATE / meta["maintainer-scripts"]).resolve()
        for name in ("preinst", "postinst", "prerm", "postrm"):
            if (scripts / name).is_file():
                shutil.copyfile(scripts / name, debian / name)
                os.chmod(debian / name, 0o755)
        (debian / "conffiles").write_text("".join(f"{c}\n" for c in meta["conf-files"]))
        depends = meta["depends"].replace("$auto", shlib_depends(binary))
        size_kib = sum(f.stat().st_size for f in stage.rglob("*") if f.is_file()) // 1024
        summary = cargo["package"].get("description", "Meridian")
        extended = "\n".join(
            " " + (line if line.strip() else ".")
            for line in meta["extended-description"].strip().splitlines()
        )
        (debian / "control").write_text(
            f"Package: {meta['name']}\n"
            f"Version: {version}-1\n"
            f"Architecture: {arch}\n"
            f"Maintainer: {meta['maintainer']}\n"
            f"Installed-Size: {size_kib}\n"
            f"Depends: {depends}\n"
            f"Section: {meta['section']}\n"
            f"Priority: {meta['priority']}\n"
            f"Description: {summary}\n{extended}\n"
        )
        out_dir = pathlib.Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        deb = out_dir / f"{meta['name']}_{version}-1_{arch}.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(deb)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    print(deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
