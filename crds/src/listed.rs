//! Lists of every variant that the compiler writes.
//!
//! `strum::VariantArray` derives an enum's variants in declaration order, and [`array`] turns
//! that slice into the fixed-size `ALL` array that tables indexed by variant are sized with
//! (`[T; T::COUNT]`, `COUNT` counted by `strum::EnumCount`). A new phase, reason or condition
//! type is therefore in its list the moment it is declared, and `variant as usize` is its
//! position there.

/// `variants` (an enum's `VARIANTS`) as an array of `N` (its `COUNT`); fails the build unless
/// the two agree.
pub(crate) const fn array<T: Copy, const N: usize>(variants: &[T]) -> [T; N] {
    assert!(variants.len() == N, "VARIANTS and COUNT disagree");
    let mut out = [variants[0]; N];
    let mut i = 1;
    while i < N {
        out[i] = variants[i];
        i += 1;
    }
    out
}
