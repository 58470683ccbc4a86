//! ACL rules never panic the rule parser, and a user's description applies back to the same
//! permissions: what ACL LIST and ACL SAVE write, ACL LOAD reads unchanged.
//!
//! Input: rules separated by newlines (as ACL SETUSER arguments; selectors may span several),
//! the first byte's low bit choosing `acl-pubsub-default`. The round trip is checked where
//! Redis's own format can carry it: not for selectors holding quote characters (the ACL file
//! splits a selector like `sdssplitargs`) or parentheses (a rule ending with `)` closes the
//! selector early), nor for first-args holding spaces (the file splits rules on spaces), as in
//! Redis.
//!
//! Run: `cargo +nightly fuzz run acl_rules` from the repository root (or `fuzz/run.sh`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::acl::rules::{Selector, User, merge_selector_args};
use meridian_server::acl::{catalog, parse_acl_file};

fn round_trips(u: &User) -> bool {
    // Inside a selector, quotes are `sdssplitargs`'s and parentheses close the selector early
    // when a rule ends with one (Redis's `ACLMergeSelectorArguments` does the same).
    let quoted = |b: &[u8]| b.iter().any(|c| matches!(c, b'"' | b'\'' | b'\\' | b'(' | b')'));
    let selector_ok = |s: &Selector| {
        !s.keys.iter().any(|k| quoted(&k.pattern))
            && !s.channels.iter().any(|c| quoted(c))
            && !s.firstargs.values().flatten().any(|a| quoted(a))
    };
    let spaced = |s: &Selector| {
        s.firstargs
            .values()
            .flatten()
            .any(|a| a.iter().any(|c| c.is_ascii_whitespace() || *c == 0))
    };
    u.selectors.iter().all(selector_ok) && !u.all_selectors().any(spaced)
}

/// The same permissions: bitmaps, first-args of denied commands, keys, channels.
fn same(a: &Selector, b: &Selector) -> bool {
    let firstargs = |s: &Selector| {
        s.firstargs
            .iter()
            .filter(|(id, _)| !s.commands.get(**id))
            .map(|(id, v)| (*id, v.clone()))
            .collect::<Vec<_>>()
    };
    a.commands == b.commands
        && a.allkeys == b.allkeys
        && a.allchannels == b.allchannels
        && a.keys == b.keys
        && a.channels == b.channels
        && firstargs(a) == firstargs(b)
}

fuzz_target!(|data: &[u8]| {
    let pubsub_all = data.first().is_some_and(|b| b & 1 == 1);
    let args: Vec<&[u8]> = data.get(1..).unwrap_or_default().split(|&c| c == b'\n').collect();
    let Ok(merged) = merge_selector_args(&args) else {
        return;
    };
    let cat = catalog();
    let mut user = User::new(b"fuzz", pubsub_all);
    for op in &merged {
        if user.apply(cat, op, pubsub_all).is_err() {
            return;
        }
    }
    let described = user.describe(cat);
    if !round_trips(&user) {
        return;
    }
    let line = [&b"user fuzz "[..], &described].concat();
    let users = match parse_acl_file(&line, "fuzz", pubsub_all) {
        Ok(u) => u,
        Err(e) => panic!(
            "description does not load back: {} ({})",
            String::from_utf8_lossy(&described),
            e
        ),
    };
    let back = users.get(&b"fuzz"[..]).expect("the user is in the file");
    assert_eq!(back.passwords, user.passwords);
    assert_eq!(back.describe(cat), described);
    assert!(same(&back.root, &user.root));
    assert_eq!(back.selectors.len(), user.selectors.len());
    for (x, y) in back.selectors.iter().zip(user.selectors.iter()) {
        assert!(same(x, y), "{}", String::from_utf8_lossy(&described));
    }
});
