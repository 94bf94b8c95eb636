//! [`ByteString`]: the type of every path, name and symbolic-link target.
//!
//! POSIX names are bytes (anything but `/` and NUL), not text: real trees
//! hold Latin-1 and otherwise non-UTF-8 names, and a name must survive the
//! library, the wire, the change stream and the mount byte for byte.
//!
//! Serde (docs/PROTOCOL.md, "Names as bytes"): a binary format (postcard:
//! not human readable) gets the bytes, which postcard writes exactly as it
//! writes a string (a varint length, then the bytes), so a UTF-8 name
//! encodes as it always did. A human-readable format (JSON) gets a string
//! when the bytes are UTF-8 and otherwise `{"base64": "<standard base64>"}`:
//! a consumer that does not know the escape fails on it instead of acting
//! on a lossy name. Both forms are accepted when reading.

use std::borrow::Borrow;
use std::fmt;
use std::ops::{Deref, DerefMut};

use base64::Engine as _;
use bstr::BString;
/// Borrowed bytes that display lossily ([`ByteString`]'s target).
pub use bstr::{BStr, ByteSlice};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An owned byte string: a path, a name or a symbolic link's target.
/// Displays lossily (U+FFFD for bytes that are not UTF-8), debugs escaped
/// (`"bad\xff"`), orders by bytes.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteString(BString);

/// The key of the JSON escape for bytes that are not UTF-8.
pub const BASE64_KEY: &str = "base64";

impl ByteString {
    pub fn new() -> ByteString {
        ByteString::default()
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_slice()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into()
    }

    pub fn as_bstr(&self) -> &BStr {
        self.0.as_bstr()
    }

    /// The text, when the bytes are UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        std::str::from_utf8(self.as_bytes()).ok()
    }

    /// The text, U+FFFD for bytes that are not UTF-8 (for messages).
    pub fn to_str_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.as_bytes())
    }

    pub fn is_utf8(&self) -> bool {
        self.to_str().is_some()
    }

    pub fn push_bytes(&mut self, b: impl AsRef<[u8]>) {
        self.0.extend_from_slice(b.as_ref());
    }

    pub fn push(&mut self, b: u8) {
        self.0.push(b);
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
}

impl Deref for ByteString {
    type Target = BStr;
    fn deref(&self) -> &BStr {
        self.0.as_bstr()
    }
}

impl DerefMut for ByteString {
    fn deref_mut(&mut self) -> &mut BStr {
        self.0.as_mut()
    }
}

impl AsRef<[u8]> for ByteString {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<BStr> for ByteString {
    fn as_ref(&self) -> &BStr {
        self.as_bstr()
    }
}

impl Borrow<[u8]> for ByteString {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<&str> for ByteString {
    fn from(s: &str) -> Self {
        ByteString(s.into())
    }
}

impl From<String> for ByteString {
    fn from(s: String) -> Self {
        ByteString(s.into())
    }
}

impl From<&String> for ByteString {
    fn from(s: &String) -> Self {
        ByteString(s.as_str().into())
    }
}

impl From<Vec<u8>> for ByteString {
    fn from(b: Vec<u8>) -> Self {
        ByteString(b.into())
    }
}

impl From<&[u8]> for ByteString {
    fn from(b: &[u8]) -> Self {
        ByteString(b.into())
    }
}

impl<const N: usize> From<&[u8; N]> for ByteString {
    fn from(b: &[u8; N]) -> Self {
        ByteString(b[..].into())
    }
}

impl From<&BStr> for ByteString {
    fn from(b: &BStr) -> Self {
        ByteString(b.to_owned())
    }
}

impl From<&ByteString> for ByteString {
    fn from(b: &ByteString) -> Self {
        b.clone()
    }
}

impl From<ByteString> for Vec<u8> {
    fn from(b: ByteString) -> Self {
        b.into_bytes()
    }
}

impl PartialEq<str> for ByteString {
    fn eq(&self, o: &str) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl PartialEq<&str> for ByteString {
    fn eq(&self, o: &&str) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl PartialEq<String> for ByteString {
    fn eq(&self, o: &String) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl PartialEq<[u8]> for ByteString {
    fn eq(&self, o: &[u8]) -> bool {
        self.as_bytes() == o
    }
}

impl PartialEq<&[u8]> for ByteString {
    fn eq(&self, o: &&[u8]) -> bool {
        self.as_bytes() == *o
    }
}

impl PartialEq<ByteString> for str {
    fn eq(&self, o: &ByteString) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl PartialEq<ByteString> for &str {
    fn eq(&self, o: &ByteString) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl PartialEq<ByteString> for String {
    fn eq(&self, o: &ByteString) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}

impl fmt::Display for ByteString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_bstr(), f)
    }
}

impl fmt::Debug for ByteString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_bstr(), f)
    }
}

impl Serialize for ByteString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return s.serialize_bytes(self.as_bytes());
        }
        match self.to_str() {
            Some(text) => s.serialize_str(text),
            None => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(
                    BASE64_KEY,
                    &base64::engine::general_purpose::STANDARD.encode(self.as_bytes()),
                )?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ByteString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteString, D::Error> {
        if d.is_human_readable() {
            d.deserialize_any(ByteStringVisitor)
        } else {
            d.deserialize_byte_buf(ByteStringVisitor)
        }
    }
}

struct ByteStringVisitor;

impl<'de> Visitor<'de> for ByteStringVisitor {
    type Value = ByteString;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, bytes, or {\"base64\": \"...\"}")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteString, E> {
        Ok(v.into())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<ByteString, E> {
        Ok(v.into())
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ByteString, E> {
        Ok(v.into())
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<ByteString, E> {
        Ok(v.into())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ByteString, A::Error> {
        // Some self-describing formats hand bytes over as a sequence.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(out.into())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ByteString, A::Error> {
        let mut out = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != BASE64_KEY || out.is_some() {
                return Err(de::Error::custom(format_args!(
                    "a name's escape is {{\"{BASE64_KEY}\": \"...\"}} alone, found key {key:?}"
                )));
            }
            let text: String = map.next_value()?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|e| de::Error::custom(format_args!("bad base64 in a name: {e}")))?;
            out = Some(ByteString::from(bytes));
        }
        out.ok_or_else(|| de::Error::custom(format_args!("missing \"{BASE64_KEY}\"")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conveniences() {
        let a = ByteString::from("/q/a");
        assert_eq!(a, "/q/a");
        assert_eq!("/q/a", a);
        assert_eq!(a, *b"/q/a".as_slice());
        let bad = ByteString::from(b"/q/bad\xff".to_vec());
        assert!(!bad.is_utf8());
        assert_eq!(bad.to_string(), "/q/bad\u{fffd}");
        assert_eq!(format!("{bad:?}"), r#""/q/bad\xff""#);
        let (a, e9) = (ByteString::from("a"), ByteString::from(b"\xe9"));
        assert!(a < e9);
        assert!(bad.starts_with(b"/q/"));
    }

    #[test]
    fn postcard_writes_what_a_string_wrote() {
        // The log format and protocol 2 frames are unchanged for UTF-8 names.
        let s = "/dir/é";
        let as_string = postcard::to_stdvec(&s.to_owned()).unwrap();
        let as_bytes = postcard::to_stdvec(&ByteString::from(s)).unwrap();
        assert_eq!(as_string, as_bytes);
        assert_eq!(as_bytes, b"\x07/dir/\xc3\xa9");
        let back: ByteString = postcard::from_bytes(&as_bytes).unwrap();
        assert_eq!(back, s);
        // A String written before decodes as a ByteString and back.
        let again: String = postcard::from_bytes(&as_bytes).unwrap();
        assert_eq!(again, s);

        let raw = ByteString::from(b"bad\xff".to_vec());
        let enc = postcard::to_stdvec(&raw).unwrap();
        assert_eq!(enc, b"\x04bad\xff");
        assert_eq!(postcard::from_bytes::<ByteString>(&enc).unwrap(), raw);
        // A release whose names were `String` refuses it, loudly.
        assert!(postcard::from_bytes::<String>(&enc).is_err());
    }

    #[test]
    fn json_golden() {
        let utf8 = ByteString::from("/q/é");
        assert_eq!(serde_json::to_string(&utf8).unwrap(), r#""/q/é""#);
        let raw = ByteString::from(b"/q/bad\xff".to_vec());
        assert_eq!(
            serde_json::to_string(&raw).unwrap(),
            r#"{"base64":"L3EvYmFk/w=="}"#
        );
        assert_eq!(
            serde_json::from_str::<ByteString>(r#"{"base64":"L3EvYmFk/w=="}"#).unwrap(),
            raw
        );
        assert_eq!(
            serde_json::from_str::<ByteString>(r#""/q/é""#).unwrap(),
            utf8
        );
        // The escape of UTF-8 bytes is accepted too (a writer may always escape).
        assert_eq!(
            serde_json::from_str::<ByteString>(r#"{"base64":"L3E="}"#).unwrap(),
            "/q"
        );
        for bad in [
            r#"{"base64":"!!"}"#,
            r#"{"b64":"L3E="}"#,
            r#"{}"#,
            r#"{"base64":"L3E=","x":1}"#,
            "12",
        ] {
            assert!(serde_json::from_str::<ByteString>(bad).is_err(), "{bad}");
        }
        // A consumer that expects text fails instead of taking a lossy name.
        assert!(serde_json::from_str::<String>(r#"{"base64":"L3EvYmFk/w=="}"#).is_err());
    }
}
