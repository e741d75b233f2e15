//! DKIM (RFC 6376): the key of `[smtp.dkim]`, loaded and checked once at
//! start-up, the signature every message carries, and the DNS TXT record
//! that publishes the public half (`invoice-reminder dkim-record`).
//!
//! Keys are PEM files: RSA (PKCS#1 `BEGIN RSA PRIVATE KEY` or PKCS#8
//! `BEGIN PRIVATE KEY`, at least 2048 bits) or Ed25519 (PKCS#8, RFC 8463).
//! Signing itself is lettre's (`lettre::message::dkim`), relaxed/relaxed
//! canonicalization (survives relays that re-fold headers), over
//! [`SIGNED_HEADERS`]. A header of that list that a message lacks is signed
//! as absent, so nobody can add it later without breaking the signature.
//! The key never appears in any output: [`DkimSigner`]'s `Debug` names only
//! the algorithm, domain and selector.

use base64::Engine as _;
use lettre::message::dkim::{
    DkimCanonicalization, DkimCanonicalizationType, DkimConfig, DkimSigningAlgorithm,
    DkimSigningKey,
};
use lettre::message::header::HeaderName;
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey};
use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey};
use rsa::traits::PublicKeyParts;
use secrecy::{ExposeSecret, SecretString};

/// The headers every signature covers, in this order: what a reader sees
/// (From, To, Subject, Date, Reply-To), what identifies and threads the
/// message, the MIME headers, and our own.
pub const SIGNED_HEADERS: [&str; 14] = [
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "Reply-To",
    "In-Reply-To",
    "References",
    "Auto-Submitted",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
    "X-Invoice-Id",
    "X-Reminder-Period",
];

/// The smallest RSA key accepted (RFC 8301 asks for at least 1024 and
/// recommends 2048; receivers increasingly refuse less).
pub const MIN_RSA_BITS: usize = 2048;

/// A private key read from PEM, ready to sign and to publish.
pub struct DkimKey {
    algorithm: DkimSigningAlgorithm,
    /// The form lettre takes: PKCS#1 PEM (RSA) or the base64 seed (Ed25519).
    signing: SecretString,
    /// The `p=` value of the DNS record: the SubjectPublicKeyInfo DER (RSA)
    /// or the raw 32-byte key (Ed25519, RFC 8463), base64.
    public: String,
}

impl DkimKey {
    /// Reads a PEM private key; the error says what is wrong with it
    /// (never its contents).
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        if let Ok(key) = rsa::RsaPrivateKey::from_pkcs1_pem(pem) {
            return Self::rsa(key);
        }
        if let Ok(key) = rsa::RsaPrivateKey::from_pkcs8_pem(pem) {
            return Self::rsa(key);
        }
        if let Ok(key) = ed25519_dalek::SigningKey::from_pkcs8_pem(pem) {
            let b64 = base64::engine::general_purpose::STANDARD;
            return Ok(Self {
                algorithm: DkimSigningAlgorithm::Ed25519,
                signing: SecretString::from(b64.encode(key.to_bytes())),
                public: b64.encode(key.verifying_key().to_bytes()),
            });
        }
        Err("not an RSA or Ed25519 private key in PEM (PKCS#1 \"BEGIN RSA PRIVATE KEY\" or PKCS#8 \"BEGIN PRIVATE KEY\")".to_owned())
    }

    fn rsa(key: rsa::RsaPrivateKey) -> Result<Self, String> {
        let bits = key.size().saturating_mul(8);
        if bits < MIN_RSA_BITS {
            return Err(format!(
                "the RSA key has {bits} bits; at least {MIN_RSA_BITS} are needed"
            ));
        }
        let signing = key
            .to_pkcs1_pem(rsa::pkcs1::LineEnding::LF)
            .map_err(|e| format!("cannot encode the RSA key: {e}"))?;
        let public = key
            .to_public_key()
            .to_public_key_der()
            .map_err(|e| format!("cannot encode the RSA public key: {e}"))?;
        Ok(Self {
            algorithm: DkimSigningAlgorithm::Rsa,
            signing: SecretString::from(signing.to_string()),
            public: base64::engine::general_purpose::STANDARD.encode(public.as_bytes()),
        })
    }

    /// `k=` of the DNS record.
    pub fn key_type(&self) -> &'static str {
        match self.algorithm {
            DkimSigningAlgorithm::Rsa => "rsa",
            DkimSigningAlgorithm::Ed25519 => "ed25519",
        }
    }

    /// The TXT record's value: `v=DKIM1; k=rsa; p=...`.
    pub fn txt_value(&self) -> String {
        format!("v=DKIM1; k={}; p={}", self.key_type(), self.public)
    }

    /// A signer for `domain` (`d=`) and `selector` (`s=`).
    pub fn signer(&self, domain: &str, selector: &str) -> Result<DkimSigner, String> {
        let key = DkimSigningKey::new(self.signing.expose_secret(), self.algorithm)
            .map_err(|e| format!("the key cannot sign: {e}"))?;
        let config = DkimConfig::new(
            selector.to_owned(),
            domain.to_owned(),
            key,
            SIGNED_HEADERS
                .iter()
                .map(|h| HeaderName::new_from_ascii_str(h))
                .collect(),
            DkimCanonicalization {
                header: DkimCanonicalizationType::Relaxed,
                body: DkimCanonicalizationType::Relaxed,
            },
        );
        Ok(DkimSigner {
            config,
            label: format!("{} key for {selector}._domainkey.{domain}", self.key_type()),
        })
    }
}

/// `[smtp.dkim]` loaded: the key, and the signer built from it once.
pub struct Dkim {
    pub domain: String,
    pub selector: String,
    key: DkimKey,
    signer: DkimSigner,
}

impl Dkim {
    /// Parses `pem` and builds the signer for `domain` and `selector`.
    pub fn load(domain: &str, selector: &str, pem: &str) -> Result<Self, String> {
        let key = DkimKey::from_pem(pem)?;
        let signer = key.signer(domain, selector)?;
        Ok(Self {
            domain: domain.to_owned(),
            selector: selector.to_owned(),
            key,
            signer,
        })
    }

    pub fn signer(&self) -> &DkimSigner {
        &self.signer
    }

    /// The zone file line to publish (see [`txt_record`]).
    pub fn txt_record(&self) -> String {
        txt_record(&self.domain, &self.selector, &self.key)
    }
}

impl std::fmt::Debug for Dkim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.signer.fmt(f)
    }
}

/// `<selector>._domainkey.<domain> TXT "..."` as a zone file line: the
/// value cut into strings of at most 255 characters (a DNS limit per
/// string; resolvers join them), each quoted.
pub fn txt_record(domain: &str, selector: &str, key: &DkimKey) -> String {
    let value = key.txt_value();
    let chunks: Vec<String> = value
        .as_bytes()
        .chunks(255)
        .map(|c| format!("\"{}\"", String::from_utf8_lossy(c)))
        .collect();
    format!("{selector}._domainkey.{domain} TXT {}", chunks.join(" "))
}

/// What signs every message: lettre's configuration, built once.
pub struct DkimSigner {
    config: DkimConfig,
    /// What `Debug` shows instead of the key.
    label: String,
}

impl DkimSigner {
    pub fn sign(&self, message: &mut lettre::Message) {
        message.sign(&self.config);
    }
}

impl std::fmt::Debug for DkimSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DkimSigner({})", self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway Ed25519 key (RFC 8032 test vector 1's seed), test only.
    const ED25519_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n-----END PRIVATE KEY-----\n";

    #[test]
    fn an_ed25519_key_publishes_its_raw_public_key() {
        let key = DkimKey::from_pem(ED25519_PEM).unwrap();
        assert_eq!(
            key.txt_value(),
            "v=DKIM1; k=ed25519; p=11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
        );
        assert_eq!(
            txt_record("example.com", "s1", &key),
            "s1._domainkey.example.com TXT \"v=DKIM1; k=ed25519; p=11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\""
        );
    }

    #[test]
    fn garbage_is_not_a_key_and_the_error_does_not_repeat_it() {
        let err = DkimKey::from_pem("secret-ish garbage").err().unwrap();
        assert!(err.contains("PEM") && !err.contains("garbage"), "{err}");
    }

    #[test]
    fn the_signers_debug_output_holds_no_key() {
        let key = DkimKey::from_pem(ED25519_PEM).unwrap();
        let shown = format!("{:?}", key.signer("example.com", "s1").unwrap());
        assert_eq!(
            shown,
            "DkimSigner(ed25519 key for s1._domainkey.example.com)"
        );
    }
}
