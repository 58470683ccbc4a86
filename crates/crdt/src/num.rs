//! `Dec`: the exact decimal behind float increments (INCRBYFLOAT, HINCRBYFLOAT, ZINCRBY).
//!
//! Redis adds in C `long double` and prints with `%.17Lf`, trailing zeros trimmed
//! (`ld2string(..., LD_STR_HUMAN)`), so that `1 + -1.1` prints `-0.1`. Binary `f64` cannot do
//! that (`-0.10000000000000009`). `Dec` keeps a signed 128-bit coefficient and a decimal
//! exponent, rounds to `DIGITS_MAX` significant digits (half-even), and formats the way Redis
//! does, so results are the ones a user typing decimals expects.
