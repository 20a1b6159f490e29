//! Where the generator's choices come from: a seeded PRNG (the deterministic mode: seed `s`
//! always gives the same module) or the bytes a fuzzer hands over (cargo fuzz's mode: the
//! fuzzer mutates the bytes and so the choices; exhausted bytes read as zeros, which pick
//! the first, smallest option everywhere, so every byte string is a valid program).

/// A source of choices.
pub struct Rng<'a> {
    src: Src<'a>,
}

enum Src<'a> {
    /// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
    /// OOPSLA 2014): one state word, passes BigCrush, and a seed gives a stream at once.
    Seeded(u64),
    Bytes(&'a [u8]),
}

impl Rng<'static> {
    /// The stream of `seed`.
    pub fn seeded(seed: u64) -> Rng<'static> {
        Rng { src: Src::Seeded(seed) }
    }
}

impl<'a> Rng<'a> {
    /// Choices read from `bytes` (8 per draw, little-endian), zeros once they run out.
    pub fn from_bytes(bytes: &'a [u8]) -> Rng<'a> {
        Rng { src: Src::Bytes(bytes) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        match &mut self.src {
            Src::Seeded(s) => {
                *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *s;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
            Src::Bytes(b) => {
                let n = b.len().min(8);
                let mut word = [0u8; 8];
                word[..n].copy_from_slice(&b[..n]);
                *b = &b[n..];
                u64::from_le_bytes(word)
            }
        }
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant for choosing programs).
    pub fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }

    /// One element of `items` (non-empty).
    pub fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }

    /// A uniformly random permutation of `0..n` (Fisher-Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i + 1));
        }
        p
    }
}
