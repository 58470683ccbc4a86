//! `SmallBytes`: an immutable byte string in right-sized storage.
//!
//! 24 bytes on the stack; up to 22 bytes are stored inline, longer strings in one exact-size
//! heap allocation. Redis strings are bytes, not UTF-8.

/// An immutable byte string; see the module doc. Equality, order and hash are those of the
/// byte slice, so `&[u8]` looks it up in maps (`Borrow<[u8]>`).
#[derive(Clone)]
pub struct SmallBytes {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    // Invariant: len <= INLINE_MAX.
    Inline {
        len: u8,
        buf: [u8; SmallBytes::INLINE_MAX],
    },
    Heap(Box<[u8]>),
}

impl SmallBytes {
    pub const INLINE_MAX: usize = 22;

    pub fn new() -> SmallBytes {
        SmallBytes {
            repr: Repr::Inline {
                len: 0,
                buf: [0; Self::INLINE_MAX],
            },
        }
    }

    /// One copy of `bytes` into right-sized storage.
    pub fn copy_from(bytes: &[u8]) -> SmallBytes {
        if bytes.len() <= Self::INLINE_MAX {
            let mut buf = [0u8; Self::INLINE_MAX];
            if let Some(dst) = buf.get_mut(..bytes.len()) {
                dst.copy_from_slice(bytes);
            }
            SmallBytes {
                repr: Repr::Inline {
                    len: bytes.len() as u8,
                    buf,
                },
            }
        } else {
            SmallBytes {
                repr: Repr::Heap(Box::from(bytes)),
            }
        }
    }

    pub fn from_vec(v: Vec<u8>) -> SmallBytes {
        if v.len() <= Self::INLINE_MAX {
            Self::copy_from(&v)
        } else {
            SmallBytes {
                repr: Repr::Heap(v.into_boxed_slice()),
            }
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.repr {
            Repr::Inline { len, buf } => buf.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(b) => b,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes owned on the heap (0 when inline), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Inline { .. } => 0,
            Repr::Heap(b) => b.len(),
        }
    }
}

impl Default for SmallBytes {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for SmallBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for SmallBytes {
    fn eq(&self, other: &SmallBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SmallBytes {}

impl PartialOrd for SmallBytes {
    fn partial_cmp(&self, other: &SmallBytes) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallBytes {
    fn cmp(&self, other: &SmallBytes) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl std::hash::Hash for SmallBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl AsRef<[u8]> for SmallBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::borrow::Borrow<[u8]> for SmallBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for SmallBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.as_slice().escape_ascii())
    }
}

const _: () = assert!(std::mem::size_of::<SmallBytes>() == 24);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_at_limit_and_heap_one_past() {
        let a = SmallBytes::copy_from(&[7u8; SmallBytes::INLINE_MAX]);
        assert_eq!(a.heap_bytes(), 0);
        assert_eq!(a.as_slice(), &[7u8; SmallBytes::INLINE_MAX]);
        let b = SmallBytes::copy_from(&[7u8; SmallBytes::INLINE_MAX + 1]);
        assert_eq!(b.heap_bytes(), SmallBytes::INLINE_MAX + 1);
        assert_eq!(b.len(), SmallBytes::INLINE_MAX + 1);
        assert_eq!(SmallBytes::from_vec(b"hi".to_vec()).as_slice(), b"hi");
    }

    #[test]
    fn order_is_the_byte_order_across_representations() {
        let short = SmallBytes::copy_from(b"b");
        let long = SmallBytes::copy_from(&[b'a'; SmallBytes::INLINE_MAX + 5]);
        assert!(long < short);
        assert!(SmallBytes::copy_from(b"ab") > SmallBytes::copy_from(b"a"));
    }
}
