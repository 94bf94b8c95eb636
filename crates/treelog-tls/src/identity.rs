//! What a certificate names: the subject's common name, or its first DNS
//! name, read straight from the DER (the few fields needed do not justify
//! a full X.509 parser); and its fingerprint.

use sha2::{Digest, Sha256};

/// The verified client certificate's name (see [`cert_name`]) on a
/// server-side TLS connection; `None` when the client sent none.
pub fn peer_identity<IO>(conn: &tokio_rustls::server::TlsStream<IO>) -> Option<String> {
    let cert = conn.get_ref().1.peer_certificates()?.first()?;
    cert_name(cert)
}

/// The subject's common name (CN) of a DER certificate, else its first DNS
/// subject alternative name; `None` when it has neither or is malformed.
pub fn cert_name(der: &[u8]) -> Option<String> {
    let tbs = Tbs::parse(der)?;
    common_name(tbs.subject).or_else(|| tbs.extensions.and_then(first_dns_name))
}

/// The SHA-256 of a DER certificate, in lower-case hex (what
/// `openssl x509 -fingerprint -sha256` prints, without the colons).
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// The DER encoding of the subject of a certificate (what a certificate it
/// issued must carry as its issuer).
pub(crate) fn subject_der(der: &[u8]) -> Option<&[u8]> {
    Tbs::parse(der).map(|t| t.subject_tlv)
}

/// The DER encoding of the issuer of a certificate.
pub(crate) fn issuer_der(der: &[u8]) -> Option<&[u8]> {
    Tbs::parse(der).map(|t| t.issuer_tlv)
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
/// [0] EXPLICIT (the version), [3] EXPLICIT (the extensions).
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;
/// dNSName, [2] IMPLICIT IA5String.
const DNS_NAME: u8 = 0x82;
/// id-at-commonName, 2.5.4.3.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];
/// id-ce-subjectAltName, 2.5.29.17.
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// The fields of a TBSCertificate used here.
struct Tbs<'a> {
    issuer_tlv: &'a [u8],
    subject: &'a [u8],
    subject_tlv: &'a [u8],
    extensions: Option<&'a [u8]>,
}

impl<'a> Tbs<'a> {
    fn parse(der: &'a [u8]) -> Option<Tbs<'a>> {
        let cert = Der(der).expect(SEQUENCE)?;
        let mut tbs = Der(Der(cert).expect(SEQUENCE)?);
        if tbs.next()?.tag == VERSION {
            let _serial = tbs.next()?;
        }
        let _signature = tbs.next()?;
        let issuer = tbs.next()?;
        let _validity = tbs.next()?;
        let subject = tbs.next()?;
        let mut extensions = None;
        while let Some(field) = tbs.next() {
            if field.tag == EXTENSIONS {
                extensions = Der(field.body).expect(SEQUENCE);
            }
        }
        (issuer.tag == SEQUENCE && subject.tag == SEQUENCE).then_some(Tbs {
            issuer_tlv: issuer.tlv,
            subject: subject.body,
            subject_tlv: subject.tlv,
            extensions,
        })
    }
}

fn common_name(subject: &[u8]) -> Option<String> {
    let mut rdns = Der(subject);
    while let Some(rdn) = rdns.next() {
        if rdn.tag != SET {
            return None;
        }
        let mut atvs = Der(rdn.body);
        while let Some(atv) = atvs.next() {
            let mut atv = Der(atv.body);
            let (oid, value) = (atv.next()?, atv.next()?);
            if oid.tag == OID && oid.body == CN_OID {
                // UTF8String, PrintableString, IA5String, ... all carry
                // their characters as bytes of UTF-8 or a subset of it.
                return String::from_utf8(value.body.to_vec()).ok();
            }
        }
    }
    None
}

fn first_dns_name(extensions: &[u8]) -> Option<String> {
    let mut exts = Der(extensions);
    while let Some(ext) = exts.next() {
        let mut fields = Der(ext.body);
        let oid = fields.next()?;
        if oid.tag != OID || oid.body != SAN_OID {
            continue;
        }
        // An optional `critical` BOOLEAN, then the OCTET STRING.
        let value = std::iter::from_fn(|| fields.next()).find(|f| f.tag == OCTET_STRING)?;
        let mut names = Der(Der(value.body).expect(SEQUENCE)?);
        while let Some(name) = names.next() {
            if name.tag == DNS_NAME {
                return String::from_utf8(name.body.to_vec()).ok();
            }
        }
    }
    None
}

/// One DER element: its tag, its contents, and its whole encoding.
#[derive(Clone, Copy)]
struct Element<'a> {
    tag: u8,
    body: &'a [u8],
    tlv: &'a [u8],
}

/// A reader of consecutive DER elements (definite lengths, single-byte
/// tags: all X.509 needs).
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn next(&mut self) -> Option<Element<'a>> {
        let d = self.0;
        let tag = *d.first()?;
        let first = *d.get(1)? as usize;
        let (len, header) = if first < 0x80 {
            (first, 2)
        } else {
            let n = first & 0x7f;
            if n == 0 || n > 4 {
                return None;
            }
            let bytes = d.get(2..2 + n)?;
            (
                bytes.iter().fold(0usize, |a, b| (a << 8) | *b as usize),
                2 + n,
            )
        };
        let end = header.checked_add(len)?;
        let body = d.get(header..end)?;
        let tlv = &d[..end];
        self.0 = &d[end..];
        Some(Element { tag, body, tlv })
    }

    /// The contents of the next element, if it has tag `tag`.
    fn expect(mut self, tag: u8) -> Option<&'a [u8]> {
        self.next().filter(|e| e.tag == tag).map(|e| e.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{Ca, CertSpec};

    #[test]
    fn names_the_common_name_then_the_first_dns_name() {
        let ca = Ca::create("test ca", 1).expect("ca");
        let mut spec = CertSpec::node("node-1");
        spec.dns = vec!["n1.example".into(), "n1b.example".into()];
        let issued = ca.issue(&spec).expect("issue");
        assert_eq!(cert_name(issued.cert.der()).as_deref(), Some("node-1"));
        assert_eq!(cert_name(ca.cert_der()).as_deref(), Some("test ca"));

        let mut params = rcgen::CertificateParams::new(vec!["only.example".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(cert_name(cert.der()).as_deref(), Some("only.example"));
    }

    #[test]
    fn malformed_input_names_nothing() {
        let ca = Ca::create("x", 1).expect("ca");
        let der = ca.cert_der().to_vec();
        for cut in [0, 1, 2, 10, der.len() / 2] {
            // Truncated: never a panic; the outer length no longer fits.
            assert_eq!(cert_name(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(cert_name(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
    }
}
