//! Glob patterns as Redis's `stringmatchlen` reads them, matched in O(text × pattern).
//!
//! Every command that matches a pattern uses `matches`: KEYS, SCAN/SSCAN/HSCAN/ZSCAN MATCH,
//! PSUBSCRIBE delivery, PUBSUB CHANNELS, CONFIG GET, COMMAND LIST FILTERBY PATTERN and ACL key
//! and channel patterns. Redis recurses once per `*` and cuts the search short with a flag
//! (CVE-2022-36021); here the same greedy idea is a loop that backtracks only to the last
//! `*`, so no pattern costs more than about `(text + 1) × (pattern + 1)` steps and none
//! recurses.
//!
//! Semantics, Redis 7.0's to the byte:
//! - `*` any run of bytes, `?` any one byte, `\x` the byte `x` (a trailing `\` is itself);
//! - `[...]` one byte from a class: `^` first negates, `\x` is `x` compared exactly (even in
//!   the case-folding variant), `a-z` a range (ends swapped if reversed, compared as C's
//!   signed `char`), `]` closes it, except as the end of a range (`[a-]]` is the range from
//!   `a` to `]`); a class left open takes the rest of the pattern and matches one byte;
//! - `nocase` folds ASCII letters only (the "C" locale);
//! - an empty text matches only the empty pattern (not even `*`), as `stringmatchlen` does.

/// Whether `text` matches `pattern` (see the module doc).
pub fn matches(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let mut steps = 0u64;
    matches_counting(pattern, text, nocase, &mut steps)
}

/// `matches`, adding the work done to `steps`: one per pattern byte examined and one per
/// restart after a `*`. The bound tests assert on: `steps <= 2 * (text + 1) * (pattern + 1)`.
pub fn matches_counting(pattern: &[u8], text: &[u8], nocase: bool, steps: &mut u64) -> bool {
    // Redis's loop runs only while both are non-empty: "" matches only "".
    if text.is_empty() {
        return pattern.is_empty();
    }
    let mut p = 0usize;
    let mut t = 0usize;
    // The position after the last `*` seen and the text position its current try began at.
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = text.get(t) {
        *steps += 1;
        if pattern.get(p) == Some(&b'*') {
            while pattern.get(p) == Some(&b'*') {
                p += 1;
                *steps += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, t));
            continue;
        }
        if p < pattern.len() {
            let (ok, next) = element(pattern, p, c, nocase, steps);
            if ok {
                p = next;
                t += 1;
                continue;
            }
        }
        // Mismatch: the last `*` takes one more byte and the rest is tried again from there.
        // Backtracking further is useless: every element but `*` takes exactly one byte, so
        // the earliest place the segment after that `*` matches is the best one.
        match star {
            Some((sp, st)) => {
                p = sp;
                t = st + 1;
                star = Some((sp, t));
            }
            None => return false,
        }
    }
    while pattern.get(p) == Some(&b'*') {
        p += 1;
        *steps += 1;
    }
    p == pattern.len()
}

/// Matches the one-byte element at `pattern[p]` (not `*`) against `c`: whether it matched
/// and where the next element starts. Where the element ends depends on the pattern only.
fn element(pattern: &[u8], p: usize, c: u8, nocase: bool, steps: &mut u64) -> (bool, usize) {
    *steps += 1;
    match pattern.get(p).copied() {
        Some(b'?') => (true, p + 1),
        Some(b'[') => class(pattern, p + 1, c, nocase, steps),
        Some(b'\\') if p + 1 < pattern.len() => {
            let lit = pattern.get(p + 1).copied().unwrap_or(b'\\');
            (same(lit, c, nocase), p + 2)
        }
        Some(lit) => (same(lit, c, nocase), p + 1),
        None => (false, p),
    }
}

/// The class starting after its `[` at `pattern[i]`; Redis's loop, step for step.
fn class(pattern: &[u8], mut i: usize, c: u8, nocase: bool, steps: &mut u64) -> (bool, usize) {
    let len = pattern.len();
    let negated = pattern.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    loop {
        *steps += 1;
        let left = len.saturating_sub(i);
        let here = pattern.get(i).copied();
        if here == Some(b'\\') && left >= 2 {
            i += 1;
            if pattern.get(i) == Some(&c) {
                matched = true;
            }
        } else if here == Some(b']') {
            break;
        } else if left == 0 {
            // Unterminated: the class ends with the pattern (Redis steps back onto the last
            // byte so that its caller's step lands on the end).
            i = i.saturating_sub(1);
            break;
        } else if left >= 3 && pattern.get(i + 1) == Some(&b'-') {
            let (a, b) = (
                pattern.get(i).copied().unwrap_or(0),
                pattern.get(i + 2).copied().unwrap_or(0),
            );
            if in_range(a, b, c, nocase) {
                matched = true;
            }
            i += 2;
        } else if let Some(lit) = here {
            if same(lit, c, nocase) {
                matched = true;
            }
        }
        i += 1;
    }
    (matched != negated, i + 1)
}

/// A range `a-b` as Redis compares it: bytes as C's signed `char`, ends swapped when
/// reversed, then (nocase) each of the three lowered.
fn in_range(a: u8, b: u8, c: u8, nocase: bool) -> bool {
    let (mut lo, mut hi, mut c) = (signed(a), signed(b), signed(c));
    if lo > hi {
        std::mem::swap(&mut lo, &mut hi);
    }
    if nocase {
        lo = lower(lo);
        hi = lower(hi);
        c = lower(c);
    }
    lo <= c && c <= hi
}

fn signed(b: u8) -> i32 {
    i32::from(b as i8)
}

/// C's `tolower` in the "C" locale on a (signed) `char` value.
fn lower(c: i32) -> i32 {
    if (i32::from(b'A')..=i32::from(b'Z')).contains(&c) {
        c + 32
    } else {
        c
    }
}

fn same(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Redis's `stringmatchlen_impl` transcribed without its `skipLongerMatches` cut: plain
    /// backtracking, exponential in the number of stars. `budget` bounds its work; `None`
    /// when spent.
    fn reference(p: &[u8], s: &[u8], nocase: bool, budget: &mut u64) -> Option<bool> {
        let (mut p, mut s) = (p, s);
        while !p.is_empty() && !s.is_empty() {
            *budget = budget.checked_sub(1)?;
            let sc = s[0];
            match p[0] {
                b'*' => {
                    while p.len() >= 2 && p[1] == b'*' {
                        p = &p[1..];
                    }
                    if p.len() == 1 {
                        return Some(true);
                    }
                    while !s.is_empty() {
                        if reference(&p[1..], s, nocase, budget)? {
                            return Some(true);
                        }
                        s = &s[1..];
                    }
                    return Some(false);
                }
                b'?' => s = &s[1..],
                b'[' => {
                    // Indices into the whole pattern, to mimic Redis's step back.
                    let mut i = 1usize;
                    let not = p.get(i) == Some(&b'^');
                    if not {
                        i += 1;
                    }
                    let mut m = false;
                    loop {
                        let left = p.len() - i;
                        if p.get(i) == Some(&b'\\') && left >= 2 {
                            i += 1;
                            if p[i] == sc {
                                m = true;
                            }
                        } else if p.get(i) == Some(&b']') {
                            break;
                        } else if left == 0 {
                            i -= 1;
                            break;
                        } else if left >= 3 && p[i + 1] == b'-' {
                            let (mut a, mut b, mut c) =
                                (p[i] as i8 as i32, p[i + 2] as i8 as i32, sc as i8 as i32);
                            if a > b {
                                std::mem::swap(&mut a, &mut b);
                            }
                            if nocase {
                                (a, b, c) = (lower(a), lower(b), lower(c));
                            }
                            i += 2;
                            if c >= a && c <= b {
                                m = true;
                            }
                        } else if same(p[i], sc, nocase) {
                            m = true;
                        }
                        i += 1;
                    }
                    if not {
                        m = !m;
                    }
                    if !m {
                        return Some(false);
                    }
                    s = &s[1..];
                    p = &p[i..];
                }
                b'\\' if p.len() >= 2 => {
                    if !same(p[1], sc, nocase) {
                        return Some(false);
                    }
                    s = &s[1..];
                    p = &p[1..];
                }
                c => {
                    if !same(c, sc, nocase) {
                        return Some(false);
                    }
                    s = &s[1..];
                }
            }
            p = &p[1..];
            if s.is_empty() {
                while p.first() == Some(&b'*') {
                    p = &p[1..];
                }
                break;
            }
        }
        Some(p.is_empty() && s.is_empty())
    }

    fn check(pattern: &[u8], text: &[u8], nocase: bool, want: bool) {
        assert_eq!(
            matches(pattern, text, nocase),
            want,
            "pattern {:?} text {:?} nocase {nocase}",
            String::from_utf8_lossy(pattern),
            String::from_utf8_lossy(text)
        );
        let mut budget = u64::MAX;
        assert_eq!(reference(pattern, text, nocase, &mut budget), Some(want));
    }

    #[test]
    fn redis_semantics() {
        for (p, t, nocase, want) in [
            (&b"*"[..], &b"anything"[..], false, true),
            (b"h?llo", b"hello", false, true),
            (b"h?llo", b"hllo", false, false),
            (b"h*llo", b"hllo", false, true),
            (b"h*llo", b"heeeello", false, true),
            (b"h[ae]llo", b"hallo", false, true),
            (b"h[ae]llo", b"hillo", false, false),
            (b"h[^e]llo", b"hello", false, false),
            (b"h[^e]llo", b"hallo", false, true),
            (b"h[a-b]llo", b"hbllo", false, true),
            (b"h[b-a]llo", b"hallo", false, true),
            (b"a\\*b", b"a*b", false, true),
            (b"a\\*b", b"axb", false, false),
            (b"KEY*", b"key1", true, true),
            (b"KEY*", b"key1", false, false),
            (b"foo", b"foobar", false, false),
            (b"foo*", b"foo", false, true),
            (b"foo**", b"foo", false, true),
            // An empty text matches only the empty pattern.
            (b"", b"", false, true),
            (b"*", b"", false, false),
            (b"**", b"", false, false),
            (b"", b"a", false, false),
            // A trailing backslash is itself.
            (b"a\\", b"a\\", false, true),
            // Inside a class a backslash escapes, exactly even with nocase.
            (b"[\\]]", b"]", false, true),
            (b"[\\A]", b"a", true, false),
            (b"[A]", b"a", true, true),
            // `]` first closes an empty class; `[^]` matches anything.
            (b"[]a", b"a", false, false),
            (b"[^]", b"x", false, true),
            // A range may end at `]`, and the class goes on after it.
            (b"[a-]b]", b"b", false, true),
            (b"[a-]b]", b"^", false, true),
            (b"[a-]]", b"]", false, true),
            // Unterminated classes take the rest of the pattern.
            (b"[abc", b"b", false, true),
            (b"x[abc", b"xd", false, false),
            (b"[", b"[", false, false),
            (b"[^", b"q", false, true),
            (b"[a-", b"-", false, true),
            // nocase ranges lower the ends after swapping: Z-a is z..a, empty.
            (b"[Z-a]", b"_", true, false),
            (b"[Z-a]", b"_", false, true),
            (b"[A-C]", b"b", true, true),
            // Ranges compare signed chars: 0x80.. sorts before ASCII.
            (b"[a-\xff]", b"\x80", false, false),
            (b"[a-\xff]", b"0", false, true),
            (b"[\x80-\xff]", b"\x90", false, true),
            (
                b"*a*a*a*a*a*a*a*a*b",
                b"aaaaaaaaaaaaaaaaaaaaaaaab",
                false,
                true,
            ),
        ] {
            check(p, t, nocase, want);
        }
    }

    /// The case that wedged the server: 12 stars against a 40-byte key that ends wrong.
    #[test]
    fn many_stars_cost_text_times_pattern() {
        let cases: [(Vec<u8>, Vec<u8>); 4] = [
            (b"a*a*a*a*a*a*a*a*a*a*a*a*b".to_vec(), vec![b'a'; 40]),
            (
                [b"a*".repeat(20), b"b".to_vec()].concat(),
                vec![b'a'; 10_000],
            ),
            (b"*?".repeat(20), vec![b'x'; 10_000]),
            (
                [b"*[a-c]".repeat(20), b"[^a-c]".to_vec()].concat(),
                [vec![b'a'; 5_000], vec![b'b'; 5_000]].concat(),
            ),
        ];
        for (pattern, text) in &cases {
            let mut steps = 0;
            let _ = matches_counting(pattern, text, false, &mut steps);
            let bound = 2 * (text.len() as u64 + 1) * (pattern.len() as u64 + 1);
            assert!(steps <= bound, "{steps} steps > {bound}");
        }
        // The 12-star case costs 104 steps; plain backtracking gives up after 10^7.
        let (pattern, text) = &cases[0];
        let mut steps = 0;
        assert!(!matches_counting(pattern, text, false, &mut steps));
        assert!(steps <= 104, "{steps}");
        let mut budget = 10_000_000;
        assert_eq!(reference(pattern, text, false, &mut budget), None);
    }

    fn small_bytes(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(alphabet), 0..max)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn agrees_with_backtracking(
            pattern in small_bytes(b"ab*?[]^-\\A\xff", 10),
            text in small_bytes(b"abAB]-^*\\\x80", 8),
            nocase in any::<bool>(),
        ) {
            let mut budget = u64::MAX;
            let want = reference(&pattern, &text, nocase, &mut budget);
            prop_assert_eq!(Some(matches(&pattern, &text, nocase)), want);
        }
    }
}
