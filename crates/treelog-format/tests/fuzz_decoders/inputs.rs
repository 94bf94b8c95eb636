//! Inputs: arbitrary bytes and mutations of valid encodings.

use super::*;

/// Arbitrary bytes, biased to small values so that postcard's enum tags,
/// bools and short lengths come out valid often enough to get deep.
pub(crate) fn bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![3 => 0u8..4, 1 => any::<u8>()], 0..max_len)
}

/// Values a length or count field is set to: just past small limits, at
/// the limits of u32/u64/usize, and overlong varints.
pub(crate) fn huge_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u32::MAX as u64),
        Just(1 << 32),
        Just(1 << 31),
        Just((1 << 28) + 1),
        Just((1 << 20) + 1),
        Just(65_536),
        Just(256),
        Just(255),
        any::<u64>(),
    ]
}

#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, u8),
    Duplicate(Index, u8),
    Truncate(Index),
    /// `self[..a] ++ other[b..]`: the head of one encoding, the tail of another.
    Splice(Index, Index),
    /// A postcard varint of a huge value, inserted or written over the bytes.
    Varint(Index, u64, bool),
    /// A 4-byte big-endian value written over the bytes (frame lengths).
    Be32(Index, u32),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        1 => (any::<Index>(), bytes(8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Splice(a, b)),
        2 => (any::<Index>(), huge_value(), any::<bool>())
            .prop_map(|(i, v, ins)| Mutation::Varint(i, v, ins)),
        1 => (any::<Index>(), prop_oneof![Just(u32::MAX), Just(1 << 30), any::<u32>()])
            .prop_map(|(i, v)| Mutation::Be32(i, v)),
    ]
}

pub(crate) fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A position in `0..=len`.
pub(crate) fn at(i: &Index, len: usize) -> usize {
    i.index(len + 1)
}

pub(crate) fn overwrite(b: &mut Vec<u8>, pos: usize, with: &[u8]) {
    for (k, &x) in with.iter().enumerate() {
        match b.get_mut(pos + k) {
            Some(y) => *y = x,
            None => b.push(x),
        }
    }
}

pub(crate) fn apply(mut b: Vec<u8>, other: &[u8], muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::FlipBit(i, bit) if !b.is_empty() => {
                let p = i.index(b.len());
                b[p] ^= 1 << bit;
            }
            Mutation::SetByte(i, v) if !b.is_empty() => {
                let p = i.index(b.len());
                b[p] = *v;
            }
            Mutation::Insert(i, ins) => {
                let p = at(i, b.len());
                b.splice(p..p, ins.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let p = at(i, b.len());
                let end = (p + *n as usize).min(b.len());
                b.drain(p..end);
            }
            Mutation::Duplicate(i, n) => {
                let p = at(i, b.len());
                let end = (p + *n as usize).min(b.len());
                let dup = b[p..end].to_vec();
                b.splice(end..end, dup);
            }
            Mutation::Truncate(i) => {
                let p = at(i, b.len());
                b.truncate(p);
            }
            Mutation::Splice(a, o) => {
                let p = at(a, b.len());
                b.truncate(p);
                b.extend_from_slice(&other[at(o, other.len())..]);
            }
            Mutation::Varint(i, v, insert) => {
                let p = at(i, b.len());
                let enc = varint(*v);
                if *insert {
                    b.splice(p..p, enc);
                } else {
                    overwrite(&mut b, p, &enc);
                }
            }
            Mutation::Be32(i, v) => {
                let p = at(i, b.len());
                overwrite(&mut b, p, &v.to_be_bytes());
            }
            Mutation::FlipBit(..) | Mutation::SetByte(..) => {}
        }
    }
    b
}

/// Mutations of valid encodings: one from `valid` mutated 1 to 4 times,
/// with a second one to splice from.
pub(crate) fn mutated<S>(valid: S) -> impl Strategy<Value = Vec<u8>>
where
    S: Strategy<Value = Vec<u8>> + 'static,
{
    let valid = valid.boxed();
    (
        valid.clone(),
        valid,
        prop::collection::vec(mutation(), 1..5),
    )
        .prop_map(|(b, other, muts)| apply(b, &other, &muts))
}
