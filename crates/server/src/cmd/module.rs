//! MODULE: Redis's module commands, for a server that loads no modules.
//!
//! Meridian cannot load Redis modules (they are C libraries written against Redis's own
//! process and data structures), so its list of loaded modules is always empty. Each
//! subcommand answers what Redis 7.0 answers with no module loaded (`module.c`
//! moduleCommand): LIST the empty list, LOAD and LOADEX the failed-load error (the log says
//! why), UNLOAD "no such module". LOAD, LOADEX and UNLOAD are protected like Redis's: refused
//! unless `enable-module-command` is `yes`, or `local` and the client is on loopback.

use super::{Ctx, Handler};
use crate::error::CmdError;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("module|help", help),
    ("module|list", list),
    ("module|load", load),
    ("module|loadex", load),
    ("module|unload", unload),
];

fn help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "LIST",
        "    Return a list of loaded modules.",
        "LOAD <path> [<arg> ...]",
        "    Load a module library from <path>, passing to it any optional arguments.",
        "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
        "    Load a module library from <path>, while passing it module configurations and optional arguments.",
        "UNLOAD <name>",
        "    Unload a module.",
    ];
    super::server::reply_help(ctx, "MODULE", LINES);
    Ok(())
}

/// MODULE LIST: the loaded modules, none.
fn list(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.array(0);
    Ok(())
}

/// MODULE LOAD path [arg ...] and MODULE LOADEX path [CONFIG name value ...] [ARGS arg ...]:
/// the load fails as Redis's does for a library it cannot load.
fn load(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    super::protected_allowed(ctx, "enable-module-command", "MODULE")?;
    let path = String::from_utf8_lossy(argv.get(2).copied().unwrap_or_default());
    tracing::warn!(
        path = %path,
        "Module {path} failed to load: Meridian does not load Redis modules"
    );
    Err(CmdError::Err(
        "Error loading the extension. Please check the server logs.".to_string(),
    ))
}

/// MODULE UNLOAD name: no module has that name.
fn unload(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    super::protected_allowed(ctx, "enable-module-command", "MODULE")?;
    Err(CmdError::Err(
        "Error unloading module: no such module with that name".to_string(),
    ))
}
