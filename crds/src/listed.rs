//! Lists of every variant that the compiler keeps true.
//!
//! An enum's `ALL` is typed `[T; T::COUNT]`, with `COUNT` counted by `strum::EnumCount` from the
//! declaration, and [`every_variant!`] checks at compile time that the list names each variant
//! once. A new phase, reason or condition type therefore does not compile until it is placed in
//! its list; nothing downstream can count it as something else.

/// Fails the build unless `$all` (an array of the fieldless enum `$ty`, `$ty::COUNT` long)
/// names every variant exactly once. `ordered` also requires declaration order, so that
/// `variant as usize` is the variant's position in the list.
macro_rules! every_variant {
    ($ty:ty, $all:expr, ordered) => {
        const _: () = {
            let all = $all;
            let mut i = 0;
            while i < all.len() {
                assert!(all[i] as usize == i, "listed out of declaration order");
                i += 1;
            }
        };
    };
    ($ty:ty, $all:expr) => {
        const _: () = {
            let all = $all;
            let mut seen = [false; <$ty as ::strum::EnumCount>::COUNT];
            let mut i = 0;
            while i < all.len() {
                let d = all[i] as usize;
                assert!(!seen[d], "a variant is listed twice");
                seen[d] = true;
                i += 1;
            }
        };
    };
}

pub(crate) use every_variant;
