//! Split invariance of the RESP request parser: parsing a buffer whole and in chunks gives
//! the same argv sequence and the same error, and the parser never panics.
//!
//! Input: byte 0 seeds the chunk sizes (bit 7 selects unauthenticated limits), the rest is
//! the data. Run: `cargo +nightly fuzz run parse_split` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::resp::parse::{ParseLimits, Parsed, Parser, ProtoError};
use smallvec::SmallVec;

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Command(Vec<Vec<u8>>),
    Skip(usize),
    Error(ProtoError),
}

/// The connection's loop: append a read, parse until Incomplete, drop consumed prefixes.
fn parse(data: &[u8], mut next_chunk: impl FnMut() -> usize, limits: ParseLimits) -> Vec<Event> {
    let mut parser = Parser::new(limits);
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let end = (at + next_chunk().max(1)).min(data.len());
        buf.extend_from_slice(&data[at..end]);
        at = end;
        loop {
            match parser.next(&buf) {
                Parsed::Command { consumed } => {
                    assert!(consumed <= buf.len());
                    {
                        let mut args = SmallVec::new();
                        parser.args(&buf, &mut args);
                        events.push(Event::Command(args.iter().map(|a| a.to_vec()).collect()));
                    }
                    buf.drain(..consumed);
                }
                Parsed::Skip { consumed } => {
                    assert!(consumed > 0 && consumed <= buf.len());
                    events.push(Event::Skip(consumed));
                    buf.drain(..consumed);
                }
                Parsed::Incomplete => break,
                Parsed::Error(error) => {
                    events.push(Event::Error(error));
                    return events;
                }
            }
        }
    }
    events
}

fuzz_target!(|input: &[u8]| {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let limits = ParseLimits {
        authenticated: seed & 0x80 == 0,
        ..ParseLimits::default()
    };
    let whole = parse(data, || usize::MAX, limits);
    let max_chunk = usize::from(seed & 0x7f) + 1;
    let mut state = u64::from(seed) | 1;
    let chunked = parse(
        data,
        || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % max_chunk as u64) as usize + 1
        },
        limits,
    );
    assert_eq!(whole, chunked);
    let bytewise = parse(data, || 1, limits);
    assert_eq!(whole, bytewise);
});
