//! How the frontend splits a large module's work between two threads, shared by `resolve`
//! (building and assembling instructions) and the verifier.
//!
//! The work is a list of groups (computations) of items (instructions), given as the
//! group sizes. Item work cuts in the middle of the items, inside a group if need be
//! ([`middle`]); per-group work cuts between whole groups where half the items lie before
//! ([`group_cut`]). Both run the same code either side of the cut, so the result is the one
//! the one-thread order gives.

/// Modules with fewer instructions than this are resolved and verified on one thread.
pub(crate) const PARALLEL_MIN_INSTRS: usize = 4096;

/// Where the middle item of groups of `sizes` lies: `(group, offset in that group)`. Items
/// before it go to the first thread. `(sizes.len(), 0)` when there are no items.
pub(crate) fn middle(sizes: &[usize]) -> (usize, usize) {
    position(sizes, sizes.iter().sum::<usize>() / 2)
}

/// Where item `k` of groups of `sizes` lies: `(group, offset in that group)`;
/// `(sizes.len(), 0)` when `k` is past the last item.
pub(crate) fn position(sizes: &[usize], k: usize) -> (usize, usize) {
    let mut at = 0;
    for (g, &n) in sizes.iter().enumerate() {
        if at + n > k {
            return (g, k - at);
        }
        at += n;
    }
    (sizes.len(), 0)
}

/// The items of group `k` (of `size` items) that fall in half `h` (0 or 1), given the
/// [`middle`] `(g, off)`.
pub(crate) fn share(
    h: usize,
    k: usize,
    size: usize,
    (g, off): (usize, usize),
) -> std::ops::Range<usize> {
    let split = match k.cmp(&g) {
        std::cmp::Ordering::Less => size,
        std::cmp::Ordering::Equal => off,
        std::cmp::Ordering::Greater => 0,
    };
    if h == 0 { 0..split } else { split..size }
}

/// The first group of the second half when groups of `sizes` are cut whole: the cut falls
/// before the group that holds the middle item, unless more than half of that group lies
/// before the middle.
pub(crate) fn group_cut(sizes: &[usize]) -> usize {
    let half = sizes.iter().sum::<usize>() / 2;
    let (mut cut, mut before) = (0, 0);
    while cut < sizes.len() && before + sizes[cut] / 2 < half {
        before += sizes[cut];
        cut += 1;
    }
    cut
}

/// Runs `a` here and `b` on a second thread; a panic on either side is resumed here.
pub(crate) fn both<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    std::thread::scope(|s| {
        let t = s.spawn(b);
        let x = a();
        (x, t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_item_is_found_inside_its_group() {
        assert_eq!(middle(&[3, 4, 5]), (1, 3)); // 12 items: the 7th (index 6) is group 1's 4th
        assert_eq!(middle(&[10]), (0, 5));
        assert_eq!(middle(&[2, 2]), (1, 0));
        assert_eq!(middle(&[]), (0, 0));
        assert_eq!(middle(&[0, 0]), (2, 0));
        assert_eq!(position(&[3, 4, 5], 0), (0, 0));
        assert_eq!(position(&[3, 4, 5], 11), (2, 4));
        assert_eq!(position(&[3, 4, 5], 12), (3, 0));
    }

    #[test]
    fn shares_of_both_halves_cover_each_group_once() {
        let sizes = [3, 4, 5];
        let m = middle(&sizes);
        let got: Vec<_> =
            (0..3).map(|k| (share(0, k, sizes[k], m), share(1, k, sizes[k], m))).collect();
        assert_eq!(got, vec![(0..3, 3..3), (0..3, 3..4), (0..0, 0..5)]);
    }

    #[test]
    fn group_cut_balances_whole_groups() {
        assert_eq!(group_cut(&[1, 1, 1, 1]), 2);
        // One giant group: it goes first, alone, when most of it lies before the middle.
        assert_eq!(group_cut(&[100, 1, 1]), 1);
        assert_eq!(group_cut(&[1, 1, 100]), 2);
        assert_eq!(group_cut(&[]), 0);
    }

    #[test]
    fn both_runs_both_sides() {
        assert_eq!(both(|| 1, || 2), (1, 2));
    }
}
