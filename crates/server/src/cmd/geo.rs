//! Geo commands on sorted sets: GEOADD GEOPOS GEODIST GEOHASH GEOSEARCH GEOSEARCHSTORE
//! GEORADIUS GEORADIUSBYMEMBER and the _RO variants.
//!
//! A port of Redis 7.0's `geo.c`, `geohash.c` and `geohash_helper.c`: a point is stored as the
//! score of its member, the 52-bit interleaved geohash (26 steps of longitude and latitude in
//! the Mercator-safe latitude range); distances are `geohashGetDistance`'s haversine with the
//! earth radius 6372797.560856 m; the search visits the same 9 geohash boxes in the same
//! order, so replies match Redis byte for byte. Writes are the sorted set's (ZADD semantics,
//! one op per member), so geo data merges by the sorted-set rules.

use std::ops::Bound;

use super::args::eq_ic;
use super::zset::{add_member, parse_score, read, reply_items, score_of, store};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::resp::reply::Reply;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("geoadd", geoadd),
    ("geopos", geopos),
    ("geodist", geodist),
    ("geohash", geohash),
    ("geosearch", geosearch),
    ("geosearchstore", geosearchstore),
    ("georadius", georadius),
    ("georadius_ro", georadius_ro),
    ("georadiusbymember", georadiusbymember),
    ("georadiusbymember_ro", georadiusbymember_ro),
];

// ---------------------------------------------------------------------------------------------
// geohash.c / geohash_helper.c
// ---------------------------------------------------------------------------------------------

const GEO_STEP_MAX: u8 = 26;
const GEO_LAT_MIN: f64 = -85.051_128_78;
const GEO_LAT_MAX: f64 = 85.051_128_78;
const GEO_LONG_MIN: f64 = -180.0;
const GEO_LONG_MAX: f64 = 180.0;
const D_R: f64 = std::f64::consts::PI / 180.0;
/// Earth's quadratic mean radius for WGS-84, as Redis uses it.
const EARTH_RADIUS_IN_METERS: f64 = 6_372_797.560_856;
const MERCATOR_MAX: f64 = 20_037_726.37;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bits {
    bits: u64,
    step: u8,
}

impl Bits {
    fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Range {
    min: f64,
    max: f64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Area {
    longitude: Range,
    latitude: Range,
}

fn deg_rad(a: f64) -> f64 {
    a * D_R
}

fn rad_deg(a: f64) -> f64 {
    a / D_R
}

fn interleave64(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555_5555_5555_5555,
        0x3333_3333_3333_3333,
        0x0F0F_0F0F_0F0F_0F0F,
        0x00FF_00FF_00FF_00FF,
        0x0000_FFFF_0000_FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let mut x = u64::from(xlo);
    let mut y = u64::from(ylo);
    for (&s, &b) in S.iter().zip(B.iter()).rev() {
        x = (x | (x << s)) & b;
        y = (y | (y << s)) & b;
    }
    x | (y << 1)
}

fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555_5555_5555_5555,
        0x3333_3333_3333_3333,
        0x0F0F_0F0F_0F0F_0F0F,
        0x00FF_00FF_00FF_00FF,
        0x0000_FFFF_0000_FFFF,
        0x0000_0000_FFFF_FFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let mut x = interleaved;
    let mut y = interleaved >> 1;
    for (&s, &b) in S.iter().zip(B.iter()) {
        x = (x | (x >> s)) & b;
        y = (y | (y >> s)) & b;
    }
    x | (y << 32)
}

fn coord_range() -> (Range, Range) {
    (
        Range {
            min: GEO_LONG_MIN,
            max: GEO_LONG_MAX,
        },
        Range {
            min: GEO_LAT_MIN,
            max: GEO_LAT_MAX,
        },
    )
}

/// `geohashEncode`: `None` outside the ranges.
fn encode(long_r: Range, lat_r: Range, longitude: f64, latitude: f64, step: u8) -> Option<Bits> {
    if step > 32 || step == 0 {
        return None;
    }
    if !(GEO_LONG_MIN..=GEO_LONG_MAX).contains(&longitude)
        || !(GEO_LAT_MIN..=GEO_LAT_MAX).contains(&latitude)
    {
        return None;
    }
    if latitude < lat_r.min
        || latitude > lat_r.max
        || longitude < long_r.min
        || longitude > long_r.max
    {
        return None;
    }
    let mut lat_offset = (latitude - lat_r.min) / (lat_r.max - lat_r.min);
    let mut long_offset = (longitude - long_r.min) / (long_r.max - long_r.min);
    lat_offset *= (1u64 << step) as f64;
    long_offset *= (1u64 << step) as f64;
    Some(Bits {
        bits: interleave64(lat_offset as u32, long_offset as u32),
        step,
    })
}

fn encode_wgs84(longitude: f64, latitude: f64, step: u8) -> Option<Bits> {
    let (lo, la) = coord_range();
    encode(lo, la, longitude, latitude, step)
}

fn decode(long_r: Range, lat_r: Range, hash: Bits) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let step = hash.step;
    let sep = deinterleave64(hash.bits);
    let lat_scale = lat_r.max - lat_r.min;
    let long_scale = long_r.max - long_r.min;
    let ilato = sep as u32;
    let ilono = (sep >> 32) as u32;
    let div = (1u64 << step) as f64;
    Some(Area {
        latitude: Range {
            min: lat_r.min + (f64::from(ilato) * 1.0 / div) * lat_scale,
            max: lat_r.min + ((f64::from(ilato) + 1.0) * 1.0 / div) * lat_scale,
        },
        longitude: Range {
            min: long_r.min + (f64::from(ilono) * 1.0 / div) * long_scale,
            max: long_r.min + ((f64::from(ilono) + 1.0) * 1.0 / div) * long_scale,
        },
    })
}

fn decode_wgs84(hash: Bits) -> Option<Area> {
    let (lo, la) = coord_range();
    decode(lo, la, hash)
}

/// C's `(uint64_t)score` as Redis's x86-64 build computes it, for scores that are no geohash
/// (a member ZADD gave any score): a negative score or an infinite one has no defined
/// conversion in C, and the compiled code gives these bits (Rust's `as` saturates instead).
fn score_bits(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    const INDEFINITE: u64 = 1 << 63;
    // `cvttsd2si`: the integer part, or the "integer indefinite" value out of range.
    let truncate = |x: f64| {
        if x.is_nan() || !(-TWO_63..TWO_63).contains(&x) {
            INDEFINITE
        } else {
            x as i64 as u64
        }
    };
    if score >= TWO_63 {
        truncate(score - TWO_63) ^ INDEFINITE
    } else {
        truncate(score)
    }
}

/// `decodeGeohash`: a score to (longitude, latitude), clamped to the valid ranges.
fn decode_score(score: f64) -> Option<[f64; 2]> {
    let area = decode_wgs84(Bits {
        bits: score_bits(score),
        step: GEO_STEP_MAX,
    })?;
    let x = ((area.longitude.min + area.longitude.max) / 2.0).clamp(GEO_LONG_MIN, GEO_LONG_MAX);
    let y = ((area.latitude.min + area.latitude.max) / 2.0).clamp(GEO_LAT_MIN, GEO_LAT_MAX);
    Some([x, y])
}

fn align52(hash: Bits) -> u64 {
    hash.bits << (52 - u32::from(hash.step) * 2)
}

fn move_x(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = hash.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let y = hash.bits & 0x5555_5555_5555_5555;
    let zz = 0x5555_5555_5555_5555u64 >> (64 - u32::from(hash.step) * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - u32::from(hash.step) * 2);
    hash.bits = x | y;
}

fn move_y(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = hash.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = hash.bits & 0x5555_5555_5555_5555;
    let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - u32::from(hash.step) * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> (64 - u32::from(hash.step) * 2);
    hash.bits = x | y;
}

/// The 8 neighbours in Redis's order: north, south, east, west, NE, NW, SE, SW.
fn neighbors(hash: Bits) -> [Bits; 8] {
    let mv = |dx: i8, dy: i8| {
        let mut h = hash;
        move_x(&mut h, dx);
        move_y(&mut h, dy);
        h
    };
    [
        mv(0, 1),
        mv(0, -1),
        mv(1, 0),
        mv(-1, 0),
        mv(1, 1),
        mv(-1, 1),
        mv(1, -1),
        mv(-1, -1),
    ]
}

fn estimate_steps_by_radius(range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut range = range_meters;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// `geohashGetDistance` (Redis 7.0).
fn distance(lon1d: f64, lat1d: f64, lon2d: f64, lat2d: f64) -> f64 {
    let lat1r = deg_rad(lat1d);
    let lon1r = deg_rad(lon1d);
    let lat2r = deg_rad(lat2d);
    let lon2r = deg_rad(lon2d);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let v = ((lon2r - lon1r) / 2.0).sin();
    2.0 * EARTH_RADIUS_IN_METERS * (u * u + lat1r.cos() * lat2r.cos() * v * v).sqrt().asin()
}

#[derive(Clone, Copy, Debug)]
enum ShapeKind {
    Circle { radius: f64 },
    Box { width: f64, height: f64 },
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    xy: [f64; 2],
    conversion: f64,
    kind: ShapeKind,
}

fn bounding_box(shape: &Shape) -> [f64; 4] {
    let [longitude, latitude] = shape.xy;
    let (h, w) = match shape.kind {
        ShapeKind::Circle { radius } => (radius, radius),
        ShapeKind::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let height = shape.conversion * h;
    let width = shape.conversion * w;
    let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
    let long_delta_top =
        rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(latitude + lat_delta).cos());
    let long_delta_bottom =
        rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(latitude - lat_delta).cos());
    let southern = latitude < 0.0;
    [
        if southern {
            longitude - long_delta_bottom
        } else {
            longitude - long_delta_top
        },
        latitude - lat_delta,
        if southern {
            longitude + long_delta_bottom
        } else {
            longitude + long_delta_top
        },
        latitude + lat_delta,
    ]
}

/// `geohashCalculateAreasByShapeWGS84`: the centre box and its 8 neighbours (zeroed when
/// useless), in the order they are searched.
fn areas_by_shape(shape: &Shape) -> [Bits; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(shape);
    let [longitude, latitude] = shape.xy;
    let radius_meters = shape.conversion
        * match shape.kind {
            ShapeKind::Circle { radius } => radius,
            ShapeKind::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
    let mut steps = estimate_steps_by_radius(radius_meters, latitude);
    let mut hash = encode_wgs84(longitude, latitude, steps).unwrap_or_default();
    let mut nb = neighbors(hash);
    let mut area = decode_wgs84(hash).unwrap_or_default();
    let dec = |h: Bits| decode_wgs84(h).unwrap_or_default();
    let mut decrease = false;
    {
        let (north, south, east, west) = (dec(nb[0]), dec(nb[1]), dec(nb[2]), dec(nb[3]));
        if north.latitude.max < max_lat
            || south.latitude.min > min_lat
            || east.longitude.max < max_lon
            || west.longitude.min > min_lon
        {
            decrease = true;
        }
    }
    if steps > 1 && decrease {
        steps -= 1;
        hash = encode_wgs84(longitude, latitude, steps).unwrap_or_default();
        nb = neighbors(hash);
        area = decode_wgs84(hash).unwrap_or_default();
    }
    // Indexes in `nb`: 0 N, 1 S, 2 E, 3 W, 4 NE, 5 NW, 6 SE, 7 SW.
    if steps >= 2 {
        let zero = Bits::default();
        if area.latitude.min < min_lat {
            nb[1] = zero;
            nb[7] = zero;
            nb[6] = zero;
        }
        if area.latitude.max > max_lat {
            nb[0] = zero;
            nb[4] = zero;
            nb[5] = zero;
        }
        if area.longitude.min < min_lon {
            nb[3] = zero;
            nb[7] = zero;
            nb[5] = zero;
        }
        if area.longitude.max > max_lon {
            nb[2] = zero;
            nb[6] = zero;
            nb[4] = zero;
        }
    }
    [hash, nb[0], nb[1], nb[2], nb[3], nb[4], nb[5], nb[6], nb[7]]
}

/// `geoWithinShape`: the point of `score` and its distance (meters) when inside.
fn within(shape: &Shape, score: f64) -> Option<([f64; 2], f64)> {
    let xy = decode_score(score)?;
    match shape.kind {
        ShapeKind::Circle { radius } => {
            let d = distance(shape.xy[0], shape.xy[1], xy[0], xy[1]);
            (d <= radius * shape.conversion).then_some((xy, d))
        }
        ShapeKind::Box { width, height } => {
            let (w, h) = (width * shape.conversion, height * shape.conversion);
            let lon_d = distance(xy[0], xy[1], shape.xy[0], xy[1]);
            let lat_d = distance(xy[0], xy[1], xy[0], shape.xy[1]);
            if lon_d > w / 2.0 || lat_d > h / 2.0 {
                return None;
            }
            Some((xy, distance(shape.xy[0], shape.xy[1], xy[0], xy[1])))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Argument helpers
// ---------------------------------------------------------------------------------------------

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

fn float_or(b: &[u8], msg: &str) -> Result<f64, CmdError> {
    parse_score(b).ok_or_else(|| CmdError::Err(msg.to_string()))
}

/// `extractLongLatOrReply`.
fn long_lat(lon: &[u8], lat: &[u8]) -> Result<[f64; 2], CmdError> {
    let x = parse_score(lon).ok_or(CmdError::NotFloat)?;
    let y = parse_score(lat).ok_or(CmdError::NotFloat)?;
    if !(GEO_LONG_MIN..=GEO_LONG_MAX).contains(&x) || !(GEO_LAT_MIN..=GEO_LAT_MAX).contains(&y) {
        return Err(CmdError::Err(format!(
            "invalid longitude,latitude pair {x:.6},{y:.6}"
        )));
    }
    Ok([x, y])
}

/// `extractUnitOrReply`: meters per unit.
fn unit(u: &[u8]) -> Result<f64, CmdError> {
    if eq_ic(u, "m") {
        Ok(1.0)
    } else if eq_ic(u, "km") {
        Ok(1000.0)
    } else if eq_ic(u, "ft") {
        Ok(0.3048)
    } else if eq_ic(u, "mi") {
        Ok(1609.34)
    } else {
        Err(CmdError::Err(
            "unsupported unit provided. please use M, KM, FT, MI".to_string(),
        ))
    }
}

/// `extractDistanceOrReply`: (radius, conversion).
fn radius_arg(r: &[u8], u: &[u8]) -> Result<(f64, f64), CmdError> {
    let d = float_or(r, "need numeric radius")?;
    if d < 0.0 {
        return Err(CmdError::Err("radius cannot be negative".to_string()));
    }
    Ok((d, unit(u)?))
}

/// Redis's `addReplyHumanLongDouble` of a double: `%.17Lf` with trailing zeros removed.
fn reply_human(out: &mut Reply, v: f64) {
    let s = format!("{v:.17}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if out.is_resp3() {
        out.raw(b",");
        out.raw(s.as_bytes());
        out.raw(b"\r\n");
    } else {
        out.bulk(s.as_bytes());
    }
}

/// `addReplyDoubleDistance`: `%.4f`.
fn reply_distance(out: &mut Reply, d: f64) {
    out.bulk(format!("{d:.4}").as_bytes());
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

fn geoadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let (mut nx, mut xx, mut ch) = (false, false, false);
    let mut i = 2;
    while let Some(a) = argv.get(i) {
        if eq_ic(a, "nx") {
            nx = true;
        } else if eq_ic(a, "xx") {
            xx = true;
        } else if eq_ic(a, "ch") {
            ch = true;
        } else {
            break;
        }
        i += 1;
    }
    if (argv.len() - i) % 3 != 0 || (xx && nx) {
        return Err(CmdError::Syntax);
    }
    let mut points = Vec::new();
    for p in argv.get(i..).unwrap_or_default().chunks(3) {
        let xy = long_lat(arg(p, 0), arg(p, 1))?;
        let bits = encode_wgs84(xy[0], xy[1], GEO_STEP_MAX)
            .map(align52)
            .unwrap_or(0);
        points.push((bits as f64, arg(p, 2)));
    }
    let db = ctx.client.db;
    match ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        Some(e) => {
            super::zset::as_zset(&e.state)?;
        }
        None => {
            if xx {
                ctx.out.int(0);
                return Ok(());
            }
        }
    }
    let (mut added, mut updated) = (0, 0);
    for (score, member) in points {
        match score_of(ctx, key, member) {
            Some(cur) => {
                if nx || cur == score {
                    continue;
                }
                add_member(ctx, key, member, score);
                updated += 1;
            }
            None => {
                if xx {
                    continue;
                }
                add_member(ctx, key, member, score);
                added += 1;
            }
        }
    }
    // GEOADD is Redis's ZADD underneath: its event.
    if added + updated > 0 {
        ctx.notify(crate::notify::ZSET, "zadd", key);
    }
    ctx.out.int(if ch { added + updated } else { added });
    Ok(())
}

fn geopos(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let z = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?;
    let pts: Vec<Option<[f64; 2]>> = argv
        .iter()
        .skip(2)
        .map(|m| z.and_then(|z| z.score(m)).and_then(decode_score))
        .collect();
    ctx.out.array(pts.len());
    for p in pts {
        match p {
            Some([x, y]) => {
                ctx.out.array(2);
                reply_human(ctx.out, x);
                reply_human(ctx.out, y);
            }
            None => ctx.out.null_array(),
        }
    }
    Ok(())
}

fn geodist(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let to_meter = match argv.len() {
        5 => unit(arg(argv, 4))?,
        n if n > 5 => return Err(CmdError::Syntax),
        _ => 1.0,
    };
    let Some(z) = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))? else {
        ctx.out.null();
        return Ok(());
    };
    let a = z.score(arg(argv, 2)).and_then(decode_score);
    let b = z.score(arg(argv, 3)).and_then(decode_score);
    match (a, b) {
        (Some(a), Some(b)) => reply_distance(ctx.out, distance(a[0], a[1], b[0], b[1]) / to_meter),
        _ => ctx.out.null(),
    }
    Ok(())
}

fn geohash(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let z = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?;
    let hashes: Vec<Option<[u8; 11]>> = argv
        .iter()
        .skip(2)
        .map(|m| {
            let xy = z.and_then(|z| z.score(m)).and_then(decode_score)?;
            let bits = encode(
                Range {
                    min: -180.0,
                    max: 180.0,
                },
                Range {
                    min: -90.0,
                    max: 90.0,
                },
                xy[0],
                xy[1],
                26,
            )
            .map_or(0, |h| h.bits);
            let mut buf = [0u8; 11];
            for (i, b) in buf.iter_mut().enumerate() {
                let idx = if i == 10 {
                    0
                } else {
                    ((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize
                };
                *b = ALPHABET.get(idx).copied().unwrap_or(b'0');
            }
            Some(buf)
        })
        .collect();
    ctx.out.array(hashes.len());
    for h in hashes {
        match h {
            Some(b) => ctx.out.bulk(&b),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

const RADIUS_COORDS: u8 = 1;
const RADIUS_MEMBER: u8 = 2;
const RADIUS_NOSTORE: u8 = 4;
const GEOSEARCH: u8 = 8;
const GEOSEARCHSTORE: u8 = 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// One match: member, score, distance (meters, then the unit), coordinates.
struct Point {
    member: Vec<u8>,
    score: f64,
    dist: f64,
    xy: [f64; 2],
}

/// Redis's `georadiusGeneric`.
fn georadius_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    src_idx: usize,
    flags: u8,
) -> Result<(), CmdError> {
    let has = |f: u8| flags & f != 0;
    let src = arg(argv, src_idx);
    let mut storekey: Option<&[u8]> = None;
    let mut storedist = false;
    // The set stays borrowed until the matches are collected (the store below writes).
    let members = read(ctx.shard, ctx.client.db, ctx.now_ms, src)?;
    let score_in = |m: &[u8]| -> Option<f64> { members.and_then(|z| z.score(m)) };
    let mut xy = [0.0f64; 2];
    let mut kind: Option<ShapeKind> = None;
    let mut conversion = 1.0;
    let base_args;
    if has(RADIUS_COORDS) {
        base_args = 6;
        xy = long_lat(arg(argv, 2), arg(argv, 3))?;
        let (r, c) = radius_arg(arg(argv, 4), arg(argv, 5))?;
        kind = Some(ShapeKind::Circle { radius: r });
        conversion = c;
    } else if has(RADIUS_MEMBER) && members.is_none() {
        base_args = 5;
    } else if has(RADIUS_MEMBER) {
        base_args = 5;
        xy = score_in(arg(argv, 2))
            .and_then(decode_score)
            .ok_or_else(|| CmdError::Err("could not decode requested zset member".to_string()))?;
        let (r, c) = radius_arg(arg(argv, 3), arg(argv, 4))?;
        kind = Some(ShapeKind::Circle { radius: r });
        conversion = c;
    } else if has(GEOSEARCHSTORE) {
        base_args = 3;
        storekey = Some(arg(argv, 1));
    } else {
        base_args = 2;
    }
    let (mut withdist, mut withhash, mut withcoords) = (false, false, false);
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let mut sort = Sort::None;
    let mut any = false;
    let mut count: i64 = 0;
    let remaining = argv.len().saturating_sub(base_args);
    let mut i = 0;
    while i < remaining {
        let a = arg(argv, base_args + i);
        let next = |k: usize| arg(argv, base_args + i + k);
        if eq_ic(a, "withdist") {
            withdist = true;
        } else if eq_ic(a, "withhash") {
            withhash = true;
        } else if eq_ic(a, "withcoord") {
            withcoords = true;
        } else if eq_ic(a, "any") {
            any = true;
        } else if eq_ic(a, "asc") {
            sort = Sort::Asc;
        } else if eq_ic(a, "desc") {
            sort = Sort::Desc;
        } else if eq_ic(a, "count") && i + 1 < remaining {
            count = super::args::int_arg(next(1))?;
            if count <= 0 {
                return Err(CmdError::Err("COUNT must be > 0".to_string()));
            }
            i += 1;
        } else if eq_ic(a, "store") && i + 1 < remaining && !has(RADIUS_NOSTORE) && !has(GEOSEARCH)
        {
            storekey = Some(next(1));
            storedist = false;
            i += 1;
        } else if eq_ic(a, "storedist")
            && i + 1 < remaining
            && !has(RADIUS_NOSTORE)
            && !has(GEOSEARCH)
        {
            storekey = Some(next(1));
            storedist = true;
            i += 1;
        } else if eq_ic(a, "storedist") && has(GEOSEARCH) && has(GEOSEARCHSTORE) {
            storedist = true;
        } else if eq_ic(a, "frommember") && i + 1 < remaining && has(GEOSEARCH) && !fromloc {
            if members.is_some() {
                xy = score_in(next(1)).and_then(decode_score).ok_or_else(|| {
                    CmdError::Err("could not decode requested zset member".to_string())
                })?;
            }
            frommember = true;
            i += 1;
        } else if eq_ic(a, "fromlonlat") && i + 2 < remaining && has(GEOSEARCH) && !frommember {
            xy = long_lat(next(1), next(2))?;
            fromloc = true;
            i += 2;
        } else if eq_ic(a, "byradius") && i + 2 < remaining && has(GEOSEARCH) && !bybox {
            let (r, c) = radius_arg(next(1), next(2))?;
            kind = Some(ShapeKind::Circle { radius: r });
            conversion = c;
            byradius = true;
            i += 2;
        } else if eq_ic(a, "bybox") && i + 3 < remaining && has(GEOSEARCH) && !byradius {
            let w = float_or(next(1), "need numeric width")?;
            let h = float_or(next(2), "need numeric height")?;
            if h < 0.0 || w < 0.0 {
                return Err(CmdError::Err(
                    "height or width cannot be negative".to_string(),
                ));
            }
            conversion = unit(next(3))?;
            kind = Some(ShapeKind::Box {
                width: w,
                height: h,
            });
            bybox = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if storekey.is_some() && (withdist || withhash || withcoords) {
        return Err(CmdError::Err(format!(
            "{} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if has(GEOSEARCHSTORE) {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        )));
    }
    let name = String::from_utf8_lossy(arg(argv, 0)).into_owned();
    if has(GEOSEARCH) && !(frommember || fromloc) {
        return Err(CmdError::Err(format!(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if has(GEOSEARCH) && !(byradius || bybox) {
        return Err(CmdError::Err(format!(
            "exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if any && count == 0 {
        return Err(CmdError::Err(
            "the ANY argument requires COUNT argument".to_string(),
        ));
    }
    let (Some(members), Some(kind)) = (members, kind) else {
        match storekey {
            Some(dst) => {
                let db = ctx.client.db;
                ctx.shard.delete_key(db, dst, ctx.now_ms);
                ctx.out.int(0);
            }
            None => ctx.out.array(0),
        }
        return Ok(());
    };
    if count != 0 && sort == Sort::None && !any {
        sort = Sort::Asc;
    }
    let shape = Shape {
        xy,
        conversion,
        kind,
    };
    let boxes = areas_by_shape(&shape);
    let limit = if any { count as usize } else { 0 };
    let mut ga: Vec<Point> = Vec::new();
    let mut last: Option<usize> = None;
    for (bi, b) in boxes.iter().enumerate() {
        if b.is_zero() {
            continue;
        }
        if let Some(l) = last {
            if boxes.get(l) == Some(b) {
                continue;
            }
        }
        if !ga.is_empty() && limit > 0 && ga.len() >= limit {
            break;
        }
        let min = align52(*b) as f64;
        let max = align52(Bits {
            bits: b.bits + 1,
            step: b.step,
        }) as f64;
        for (m, sc) in members.range_by_score(Bound::Included(min), Bound::Excluded(max)) {
            if let Some((pxy, d)) = within(&shape, sc) {
                ga.push(Point {
                    member: m.to_vec(),
                    score: sc,
                    dist: d,
                    xy: pxy,
                });
                if limit > 0 && ga.len() >= limit {
                    break;
                }
            }
        }
        last = Some(bi);
    }
    if ga.is_empty() && storekey.is_none() {
        ctx.out.array(0);
        return Ok(());
    }
    match sort {
        Sort::Asc => ga.sort_by(|a, b| {
            a.dist
                .partial_cmp(&b.dist)
                .unwrap_or(std::cmp::Ordering::Equal)
        }),
        Sort::Desc => ga.sort_by(|a, b| {
            b.dist
                .partial_cmp(&a.dist)
                .unwrap_or(std::cmp::Ordering::Equal)
        }),
        Sort::None => {}
    }
    let returned = if count == 0 {
        ga.len()
    } else {
        ga.len().min(count as usize)
    };
    ga.truncate(returned);
    for p in ga.iter_mut() {
        p.dist /= shape.conversion;
    }
    match storekey {
        None => {
            let opts = usize::from(withdist) + usize::from(withhash) + usize::from(withcoords);
            if opts == 0 {
                let items: Vec<(&[u8], f64)> =
                    ga.iter().map(|p| (p.member.as_slice(), p.score)).collect();
                reply_items(ctx.out, &items, false);
                return Ok(());
            }
            ctx.out.array(ga.len());
            for p in &ga {
                ctx.out.array(opts + 1);
                ctx.out.bulk(&p.member);
                if withdist {
                    reply_distance(ctx.out, p.dist);
                }
                if withhash {
                    ctx.out.int(p.score as i64);
                }
                if withcoords {
                    ctx.out.array(2);
                    reply_human(ctx.out, p.xy[0]);
                    reply_human(ctx.out, p.xy[1]);
                }
            }
        }
        Some(dst) => {
            let mut items: Vec<(Vec<u8>, f64)> = ga
                .into_iter()
                .map(|p| (p.member, if storedist { p.dist } else { p.score }))
                .collect();
            items.sort_by(|a, b| {
                a.1.partial_cmp(&b.1)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then_with(|| a.0.cmp(&b.0))
            });
            let event = if has(GEOSEARCH) {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            let n = store(ctx, dst, &items, event);
            ctx.out.int(n as i64);
        }
    }
    Ok(())
}

fn georadius(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    georadius_generic(ctx, argv, 1, RADIUS_COORDS)
}

fn georadius_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    georadius_generic(ctx, argv, 1, RADIUS_COORDS | RADIUS_NOSTORE)
}

fn georadiusbymember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    georadius_generic(ctx, argv, 1, RADIUS_MEMBER)
}

fn georadiusbymember_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    georadius_generic(ctx, argv, 1, RADIUS_MEMBER | RADIUS_NOSTORE)
}

fn geosearch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    georadius_generic(ctx, argv, 1, GEOSEARCH)
}

fn geosearchstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    georadius_generic(ctx, argv, 2, GEOSEARCH | GEOSEARCHSTORE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palermo_encodes_like_redis() {
        let h = encode_wgs84(13.361389, 38.115556, GEO_STEP_MAX).map(align52);
        assert_eq!(h, Some(3_479_099_956_230_698));
        let xy = decode_score(3_479_099_956_230_698.0).unwrap();
        assert_eq!(format!("{:.17}", xy[0]), "13.36138933897018433");
        assert_eq!(format!("{:.17}", xy[1]), "38.11555639549629859");
    }

    /// Scores no GEOADD gives (ZADD of anything) decode from the bits Redis's build reads.
    #[test]
    fn non_geohash_scores_convert_as_redis_does() {
        assert_eq!(score_bits(3.9), 3);
        assert_eq!(score_bits(-1.0), u64::MAX);
        assert_eq!(score_bits(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(score_bits(f64::INFINITY), 0);
        assert_eq!(score_bits(9_223_372_036_854_775_808.0), 1 << 63);
        assert_eq!(score_bits(1e300), 0);
        // GEOPOS of a member ZADDed with -inf: Redis 7.0.15 answers longitude 180.
        let xy = decode_score(f64::NEG_INFINITY).unwrap();
        assert_eq!(xy[0], 180.0);
    }

    #[test]
    fn interleave_round_trips() {
        let v = interleave64(0x1234_5678, 0x9abc_def0);
        assert_eq!(deinterleave64(v), 0x9abc_def0_1234_5678);
    }
}
