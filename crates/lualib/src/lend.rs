//! Lending two values to a Lua state's Rust callbacks for the length of a script run.
//!
//! A script runs while its host (the shard) is borrowed by the caller, and the callbacks the
//! script calls (`redis.call`, the count hook...) need that same borrow. `mlua::Lua::scope`
//! can lend it, but costs a scope, a userdata per lent value and a registry slot set per run,
//! and a registry read, a metatable check and a type-id check per callback: in `perf`, more than
//! a tenth of a shard's time under `EVALSHA`. A [`Lender`] keeps two raw pointers in cells, set
//! by [`Lender::lend`] for the length of a closure and reached by [`Lender::with`], which hands
//! out the two `&mut` at most once at a time (a nested `with` gets `None`, as a second
//! `RefCell::borrow_mut` would fail).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Two values of types `A` and `B` lent for the length of [`Lender::lend`]'s closure.
/// Callbacks hold the `Lender` (an `Rc` of it, captured when they are created).
pub struct Lender<A, B> {
    /// The lent values; `None` outside `lend`.
    lent: Cell<Option<(NonNull<A>, NonNull<B>)>>,
    /// A `with` closure holds the two `&mut` now.
    taken: Cell<bool>,
    /// Neither Send nor Sync: the pointers are only valid on the lending thread.
    _not_send: PhantomData<*mut ()>,
}

impl<A, B> Default for Lender<A, B> {
    fn default() -> Self {
        Lender::new()
    }
}

impl<A, B> std::fmt::Debug for Lender<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lender")
            .field("lent", &self.lent.get().is_some())
            .field("taken", &self.taken.get())
            .finish()
    }
}

/// Puts back what a `lend` or `with` found when it started, also when its closure unwinds.
struct Restore<'l, A, B> {
    lender: &'l Lender<A, B>,
    lent: Option<(NonNull<A>, NonNull<B>)>,
    taken: bool,
}

impl<A, B> Drop for Restore<'_, A, B> {
    fn drop(&mut self) {
        self.lender.lent.set(self.lent);
        self.lender.taken.set(self.taken);
    }
}

impl<A, B> Lender<A, B> {
    pub fn new() -> Self {
        Lender {
            lent: Cell::new(None),
            taken: Cell::new(false),
            _not_send: PhantomData,
        }
    }

    /// Lends `a` and `b` to [`Lender::with`] while `f` runs. Nests: an inner `lend` (made with
    /// values a `with` handed out, for instance) lends its own values until it returns, then
    /// the outer ones are back.
    pub fn lend<R>(&self, a: &mut A, b: &mut B, f: impl FnOnce() -> R) -> R {
        let _restore = Restore {
            lender: self,
            lent: self.lent.get(),
            taken: self.taken.get(),
        };
        self.lent.set(Some((NonNull::from(a), NonNull::from(b))));
        self.taken.set(false);
        f()
    }

    /// Runs `f` with the lent values; `None` when nothing is lent, or when a `with` up the
    /// stack holds them already.
    pub fn with<R>(&self, f: impl FnOnce(&mut A, &mut B) -> R) -> Option<R> {
        let (mut a, mut b) = self.lent.get()?;
        if self.taken.get() {
            return None;
        }
        let _restore = Restore {
            lender: self,
            lent: self.lent.get(),
            taken: false,
        };
        self.taken.set(true);
        // SAFETY: the pointers come from `&mut A` and `&mut B` that `lend` holds borrowed
        // until its closure returns, and `lend`'s guard clears them before that borrow ends
        // (also on unwind), so they point to live values here. `taken` makes this the only
        // place that turns them into references until `f` returns (a nested `with` gets
        // `None`), and `Lender` is not Send, so no other thread reaches them: the two `&mut`
        // are unique for their lifetime, which `f`'s signature bounds by this call.
        let r = unsafe { f(a.as_mut(), b.as_mut()) };
        Some(r)
    }

    /// Whether values are lent now (a script run is under way).
    pub fn is_lent(&self) -> bool {
        self.lent.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_only_inside_and_once_at_a_time() {
        let l: Lender<u32, String> = Lender::new();
        assert!(l.with(|_, _| ()).is_none());
        let (mut a, mut b) = (1u32, String::from("x"));
        l.lend(&mut a, &mut b, || {
            let r = l.with(|a, b| {
                *a += 1;
                b.push('y');
                // A nested with cannot alias the two &mut.
                assert!(l.with(|_, _| ()).is_none());
                *a
            });
            assert_eq!(r, Some(2));
            assert!(l.with(|_, _| ()).is_some());
        });
        assert!(l.with(|_, _| ()).is_none());
        assert_eq!((a, b.as_str()), (2, "xy"));
    }

    #[test]
    fn nested_lend_then_the_outer_values_again() {
        let l: Lender<u32, u32> = Lender::new();
        let (mut a, mut b) = (1u32, 2u32);
        l.lend(&mut a, &mut b, || {
            l.with(|a, b| {
                let (mut c, mut d) = (*a + 10, *b + 10);
                l.lend(&mut c, &mut d, || {
                    assert_eq!(l.with(|c, d| (*c, *d)), Some((11, 12)));
                });
                // Back inside the outer with: still taken.
                assert!(l.with(|_, _| ()).is_none());
            });
            assert_eq!(l.with(|a, b| (*a, *b)), Some((1, 2)));
        });
        assert!(!l.is_lent());
    }

    #[test]
    fn a_panic_inside_clears_the_loan() {
        let l: Lender<u32, u32> = Lender::new();
        let (mut a, mut b) = (1u32, 2u32);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.lend(&mut a, &mut b, || {
                l.with(|_, _| panic!("inside"));
            })
        }));
        assert!(r.is_err());
        assert!(!l.is_lent());
        assert!(l.with(|_, _| ()).is_none());
    }
}
