//! LOLWUT [VERSION v] [args]: Redis's computer art (`lolwut.c`, `lolwut5.c`, `lolwut6.c`).
//!
//! Version 5 draws Georg Nees's "Schotter", version 6 a city skyline; any other version (and
//! the default, 7) prints the version line only, as Redis 7.0 does. The drawings are random,
//! as Redis's are (Redis uses `rand()`; here a xorshift generator seeded per call). Sizes are
//! clamped as Redis clamps them, so the work is bounded.

use super::{Ctx, Handler, args::eq_ic, args::parse_i64};
use crate::error::CmdError;

pub const HANDLERS: &[(&str, Handler)] = &[("lolwut", lolwut)];

/// A canvas of small colour values (`lwCanvas`).
struct Canvas {
    width: i64,
    height: i64,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: i64, height: i64, bg: u8) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![bg; (width * height) as usize],
        }
    }

    fn put(&mut self, x: i64, y: i64, color: u8) {
        if x < 0 || x >= self.width || y < 0 || y >= self.height {
            return;
        }
        if let Some(p) = self.pixels.get_mut((x + y * self.width) as usize) {
            *p = color;
        }
    }

    fn get(&self, x: i64, y: i64) -> u8 {
        if x < 0 || x >= self.width || y < 0 || y >= self.height {
            return 0;
        }
        self.pixels
            .get((x + y * self.width) as usize)
            .copied()
            .unwrap_or(0)
    }

    /// `lwDrawLine`: Bresenham.
    fn line(&mut self, mut x1: i64, mut y1: i64, x2: i64, y2: i64, color: u8) {
        let (dx, dy) = ((x2 - x1).abs(), (y2 - y1).abs());
        let (sx, sy) = (if x1 < x2 { 1 } else { -1 }, if y1 < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.put(x1, y1, color);
            if x1 == x2 && y1 == y2 {
                break;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x1 += sx;
            }
            if e2 < dx {
                err += dx;
                y1 += sy;
            }
        }
    }

    /// `lwDrawSquare`: a square of side `size` centred at (x, y), rotated by `angle`.
    fn square(&mut self, x: i64, y: i64, size: f32, angle: f32, color: u8) {
        let size = (size / std::f32::consts::SQRT_2).round();
        let mut k = std::f32::consts::FRAC_PI_4 + angle;
        let mut px = [0i64; 4];
        let mut py = [0i64; 4];
        for (a, b) in px.iter_mut().zip(py.iter_mut()) {
            *a = (k.sin() * size + x as f32).round() as i64;
            *b = (k.cos() * size + y as f32).round() as i64;
            k += std::f32::consts::FRAC_PI_2;
        }
        for j in 0..4 {
            let n = (j + 1) % 4;
            let (Some(&x1), Some(&y1), Some(&x2), Some(&y2)) =
                (px.get(j), py.get(j), px.get(n), py.get(n))
            else {
                continue;
            };
            self.line(x1, y1, x2, y2, color);
        }
    }
}

/// C's `rand()` stand-in: uniform in 0..=RAND_MAX (2^31 - 1).
struct Rand(u64);

impl Rand {
    const MAX: u64 = 2_147_483_647;

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 33) & Self::MAX
    }

    /// `rand() % n` for a positive n.
    fn below(&mut self, n: i64) -> i64 {
        (self.next() % n.max(1) as u64) as i64
    }
}

/// LOLWUT [VERSION v] [args ...].
fn lolwut(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut version: Option<i64> = None;
    let mut args = argv.get(1..).unwrap_or_default();
    if argv.len() >= 3 && argv.get(1).is_some_and(|a| eq_ic(a, "version")) {
        version =
            Some(parse_i64(argv.get(2).copied().unwrap_or_default()).ok_or(CmdError::NotInteger)?);
        args = argv.get(3..).unwrap_or_default();
    }
    // Each drawing parses only the arguments it takes (Redis's `getLongFromObjectOrReply`);
    // the others are ignored.
    let numbers = |n: usize| -> Result<Vec<i64>, CmdError> {
        args.iter()
            .take(n)
            .map(|a| parse_i64(a).ok_or(CmdError::NotInteger))
            .collect()
    };
    let seed = (ctx.now_ms ^ (ctx.client.id() << 32)) | 1;
    // Redis formats the version as "%u.0.0" and picks the drawing by its first characters.
    let text = match version.map(|v| v as u32) {
        Some(5) => schotter(&numbers(3)?, seed),
        Some(6) => skyline(&numbers(2)?, seed),
        _ => format!("Redis ver. {}\n", crate::server::REDIS_VERSION),
    };
    ctx.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// LOLWUT VERSION 5 [columns [squares-per-row [squares-per-col]]].
fn schotter(nums: &[i64], seed: u64) -> String {
    let cols = nums.first().copied().unwrap_or(66).clamp(1, 1000);
    let per_row = nums.get(1).copied().unwrap_or(8).clamp(1, 200);
    let per_col = nums.get(2).copied().unwrap_or(12).clamp(1, 200);
    let mut rng = Rand(seed);
    let width = cols * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f32 / per_row as f32;
    let height = (side * per_col as f32) as i64 + padding * 2;
    let mut canvas = Canvas::new(width, height, 0);
    for y in 0..per_col {
        for x in 0..per_row {
            let mut sx = (x as f32 * side + side / 2.0 + padding as f32) as i64;
            let mut sy = (y as f32 * side + side / 2.0 + padding as f32) as i64;
            let mut angle = 0.0f32;
            if y > 1 {
                let mut r = [0f32; 3];
                for v in r.iter_mut() {
                    *v = rng.next() as f32 / Rand::MAX as f32 / per_col as f32 * y as f32;
                }
                for v in r.iter_mut() {
                    if rng.next() % 2 == 1 {
                        *v = -*v;
                    }
                }
                let [r1, r2, r3] = r;
                angle = r1;
                sx += (r2 * side / 3.0) as i64;
                sy += (r3 * side / 3.0) as i64;
            }
            canvas.square(sx, sy, side, angle, 1);
        }
    }
    let mut text = String::new();
    let mut y = 0;
    while y < canvas.height {
        let mut x = 0;
        while x < canvas.width {
            let bits = [
                (x, y, 0),
                (x, y + 1, 1),
                (x, y + 2, 2),
                (x + 1, y, 3),
                (x + 1, y + 1, 4),
                (x + 1, y + 2, 5),
                (x, y + 3, 6),
                (x + 1, y + 3, 7),
            ];
            let byte = bits
                .iter()
                .filter(|(px, py, _)| canvas.get(*px, *py) != 0)
                .fold(0u32, |acc, (_, _, b)| acc | (1 << b));
            text.push(char::from_u32(0x2800 + byte).unwrap_or(' '));
            x += 2;
        }
        if y != canvas.height - 1 {
            text.push('\n');
        }
        y += 4;
    }
    text.push_str("\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. ");
    text.push_str(crate::server::REDIS_VERSION);
    text.push('\n');
    text
}

/// One skyscraper of `generateSkyline`.
struct Skyscraper {
    xoff: i64,
    width: i64,
    height: i64,
    windows: bool,
    color: u8,
}

fn skyscraper(canvas: &mut Canvas, s: &Skyscraper, rng: &mut Rand) {
    let start = canvas.height - 1;
    let end = start - s.height + 1;
    let mut y = start;
    while y >= end {
        for x in s.xoff..s.xoff + s.width {
            if y == end && (x <= s.xoff + 1 || x >= s.xoff + s.width - 2) {
                continue;
            }
            let mut color = s.color;
            if s.windows
                && x > s.xoff + 1
                && x < s.xoff + s.width - 2
                && y > end + 1
                && y < start - 1
            {
                let relx = x - (s.xoff + 1);
                let rely = y - (end + 1);
                if (relx / 2) % 2 != 0 && rely % 2 != 0 {
                    loop {
                        color = 1 + (rng.next() % 2) as u8;
                        if color != s.color {
                            break;
                        }
                    }
                    if relx % 2 != 0 {
                        color = canvas.get(x - 1, y);
                    }
                }
            }
            canvas.put(x, y, color);
        }
        y -= 1;
    }
}

/// LOLWUT VERSION 6 [columns [rows]].
fn skyline(nums: &[i64], seed: u64) -> String {
    let cols = nums.first().copied().unwrap_or(80).clamp(1, 1000);
    let rows = nums.get(1).copied().unwrap_or(20).clamp(1, 1000);
    let mut rng = Rand(seed);
    let mut canvas = Canvas::new(cols, rows, 3);
    let h = canvas.height;
    for color in [2u8, 1] {
        let mut offset = -10;
        while offset < canvas.width {
            offset += rng.below(8);
            let width = 10 + rng.below(9);
            let height = if color == 2 {
                h / 2 + rng.below(h) / 2
            } else {
                h / 2 + rng.below(h) / 3
            };
            let s = Skyscraper {
                xoff: offset,
                width,
                height,
                windows: false,
                color,
            };
            skyscraper(&mut canvas, &s, &mut rng);
            offset += if color == 2 { width / 2 } else { width + 1 };
        }
    }
    let mut offset = -10;
    while offset < canvas.width {
        offset += rng.below(8);
        let mut width = 5 + rng.below(14);
        if width % 4 != 0 {
            width += width % 3;
        }
        let height = h / 3 + rng.below(h) / 2;
        let s = Skyscraper {
            xoff: offset,
            width,
            height,
            windows: true,
            color: 0,
        };
        skyscraper(&mut canvas, &s, &mut rng);
        offset += width + 5;
    }
    let mut text = String::new();
    for y in 0..canvas.height {
        for x in 0..canvas.width {
            let ce = match canvas.get(x, y) {
                1 => "0;90;100m",
                2 => "0;37;47m",
                3 => "0;97;107m",
                _ => "0;30;40m",
            };
            text.push_str("\x1b[");
            text.push_str(ce);
            text.push_str(" \x1b[0m");
        }
        if y != canvas.height - 1 {
            text.push('\n');
        }
    }
    text.push_str("\nDedicated to the 8 bit game developers of past and present.\nOriginal 8 bit image from Plaguemon by hikikomori. Redis ver. ");
    text.push_str(crate::server::REDIS_VERSION);
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawings_have_redis_shape() {
        let s = schotter(&[], 7);
        // 66 columns of braille characters, 12 rows of squares.
        let first = s.lines().next().unwrap();
        assert_eq!(first.chars().count(), 66);
        assert!(s.ends_with("Georg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15\n"));
        let k = skyline(&[10, 5], 7);
        assert_eq!(k.lines().count(), 5 + 2);
        assert_eq!(k.lines().next().unwrap().matches(' ').count(), 10);
        // Sizes are clamped.
        assert_eq!(
            schotter(&[0, 0, 0], 1)
                .lines()
                .next()
                .unwrap()
                .chars()
                .count(),
            1
        );
    }
}
