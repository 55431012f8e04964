use super::*;

// Vectors from Go's golang.org/x/mod/sumdb/note, note_test.go (TestNewVerifier, TestNewSigner,
// TestSign, TestOpen): the same Ed25519 signed-note format that C2SP signed-note standardises.
const PETER_VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
const PETER_SKEY: &str = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
const ENOCH_VKEY: &str = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop";
const TEXT: &str =
    "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
const PETER_SIG: &str =
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
const ENOCH_SIG: &str =
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n";

fn peter() -> Verifier {
    Verifier::from_vkey(PETER_VKEY).unwrap()
}

fn enoch() -> Verifier {
    Verifier::from_vkey(ENOCH_VKEY).unwrap()
}

#[test]
fn key_id_vector() {
    let vkey = VerifierKey::parse(PETER_VKEY).unwrap();
    assert_eq!(vkey.name(), "PeterNeumann");
    assert_eq!(vkey.key_id(), 0xc74f20a3);
    assert_eq!(vkey.sig_type(), SIG_TYPE_ED25519);
    assert_eq!(key_id("PeterNeumann", SIG_TYPE_ED25519, vkey.public_key()), 0xc74f20a3);
    assert_eq!(vkey.to_string(), PETER_VKEY);
    assert_eq!(PETER_VKEY.parse::<VerifierKey>().unwrap(), vkey);
    assert_eq!(peter().vkey(), PETER_VKEY);
    assert_eq!(enoch().key_id(), 0xaf0cfe78);
}

#[test]
fn signer_from_go_skey_reproduces_go_signature() {
    let signer = Signer::from_skey(PETER_SKEY).unwrap();
    assert_eq!(signer.name(), "PeterNeumann");
    assert_eq!(signer.key_id(), 0xc74f20a3);
    assert_eq!(signer.vkey(), PETER_VKEY);
    assert_eq!(signer.skey(), PETER_SKEY);
    assert_eq!(sign(TEXT, &[&signer]).unwrap(), format!("{TEXT}\n{PETER_SIG}"));
    let debug = format!("{signer:?}");
    assert!(debug.contains("c74f20a3") && !debug.contains("AYEKFALV"), "{debug}");
}

#[test]
fn mangled_keys_are_rejected() {
    // As TestNewVerifier and TestNewSigner: every proper substring and every single-byte
    // increment of a valid key is rejected.
    for (key, parse) in [
        (PETER_VKEY, (|k: &str| Verifier::from_vkey(k).is_ok()) as fn(&str) -> bool),
        (PETER_SKEY, |k: &str| Signer::from_skey(k).is_ok()),
    ] {
        let bytes = key.as_bytes();
        for i in 0..=bytes.len() {
            for j in i + 1..=bytes.len() {
                if (i, j) != (0, bytes.len()) {
                    let part = String::from_utf8_lossy(&bytes[i..j]);
                    assert!(!parse(&part), "{part:?} accepted");
                }
            }
        }
        for i in 0..bytes.len() {
            let mut mangled = bytes.to_vec();
            mangled[i] = mangled[i].wrapping_add(1);
            let mangled = String::from_utf8_lossy(&mangled);
            assert!(!parse(&mangled), "{mangled:?} accepted");
        }
    }
    // Wrong key length and unknown algorithm, each with a key ID adjusted to match. (The first
    // also has non-canonical base64 padding bits, which Go tolerates and this crate does not.)
    assert!(Verifier::from_vkey("PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==").is_err());
    let long = VerifierKey::new("PeterNeumann", SIG_TYPE_ED25519, &[7; 33]).unwrap();
    assert_eq!(Verifier::from_verifier_key(&long), Err(NoteError::InvalidPublicKey));
    assert_eq!(Verifier::from_vkey(&long.to_string()), Err(NoteError::InvalidPublicKey));
    assert_eq!(
        Verifier::from_vkey("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"),
        Err(NoteError::UnsupportedSignatureType(0x65))
    );
    assert!(matches!(
        VerifierKey::parse("PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"),
        Err(NoteError::KeyIdMismatch { .. })
    ));
    assert_eq!(
        VerifierKey::parse("Peter Neumann+c74f20a3+AA=="),
        Err(NoteError::InvalidKeyName("Peter Neumann".into()))
    );
    assert!(Signer::from_seed("a+b", &[1; 32]).is_err());
    assert!(Signer::from_seed("", &[1; 32]).is_err());
    assert!(Signer::from_seed("tab\tname", &[1; 32]).is_err());
    assert!(Signer::from_seed("nbsp\u{a0}name", &[1; 32]).is_err());
}

#[test]
fn opens_go_notes() {
    let (p, e) = (peter(), enoch());
    let msg = format!("{TEXT}\n{PETER_SIG}{ENOCH_SIG}");

    // One known key: its signature verifies, the other is ignored.
    let opened = open(msg.as_bytes(), &[&p]).unwrap();
    assert_eq!(opened.note.text(), TEXT);
    assert_eq!(opened.verified_by, vec![0]);
    assert_eq!(opened.note.signatures().len(), 2);
    assert_eq!(opened.note.signatures()[1].name(), "EnochRoot");
    assert_eq!(opened.note.signatures()[1].key_id(), 0xaf0cfe78);
    assert_eq!(opened.note.to_string(), msg);

    assert_eq!(open(msg.as_bytes(), &[&e, &p]).unwrap().verified_by, vec![0, 1]);
    assert_eq!(open(msg.as_bytes(), &[]), Err(NoteError::NoKnownSignature));
    assert_eq!(
        open(format!("{TEXT}\n{ENOCH_SIG}").as_bytes(), &[&e, &p, &e]),
        Err(NoteError::AmbiguousKey { name: "EnochRoot".into(), key_id: 0xaf0cfe78 })
    );
    assert!(open(format!("{TEXT}\n{PETER_SIG}").as_bytes(), &[&e, &p, &e]).is_ok());

    // A signature by a known key that does not verify rejects the note.
    let bad = format!("{TEXT}\n{}ABCD{}", &PETER_SIG[..60], &PETER_SIG[60..]);
    assert_eq!(
        open(bad.as_bytes(), &[&p]),
        Err(NoteError::InvalidSignature { name: "PeterNeumann".into(), key_id: 0xc74f20a3 })
    );
    // … but not when the key is unknown.
    let enoch_bad = format!("{}ABCD{}", &ENOCH_SIG[..60], &ENOCH_SIG[60..]);
    let msg = format!("{TEXT}\n{PETER_SIG}{PETER_SIG}{ENOCH_SIG}{ENOCH_SIG}{enoch_bad}");
    assert_eq!(open(msg.as_bytes(), &[&p]).unwrap().verified_by, vec![0]);

    // Too many signatures.
    let many = format!("{TEXT}\n{}", PETER_SIG.repeat(101));
    assert_eq!(open(many.as_bytes(), &[&p]), Err(NoteError::TooManySignatures));
    assert!(open(format!("{TEXT}\n{}", PETER_SIG.repeat(100)).as_bytes(), &[&p]).is_ok());
}

#[test]
fn malformed_notes_are_rejected() {
    // The bad messages of TestOpen, and more.
    let bad: Vec<Vec<u8>> = vec![
        TEXT.into(),
        format!("{TEXT}\n").into(),
        format!("{TEXT}\n{}", &PETER_SIG[..PETER_SIG.len() - 1]).into(),
        format!("\x01{TEXT}\n{PETER_SIG}").into(),
        [b"\xff".as_slice(), format!("{TEXT}\n{PETER_SIG}").as_bytes()].concat(),
        format!("{TEXT}\n— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=").into(),
        format!("{TEXT}\n{PETER_SIG}Unexpected line.\n").into(),
        format!("{TEXT}\n{PETER_SIG}\n").into(),
        format!("{TEXT}\r\n{PETER_SIG}").into(),
        format!("{TEXT}\n- PeterNeumann AAAAAAA=\n").into(),
        format!("{TEXT}\n— PeterNeumann AAAA\n").into(),
        format!("{TEXT}\n— PeterNeumann\n").into(),
        format!("{TEXT}\n— Peter+Neumann AAAAAAA=\n").into(),
        format!("{TEXT}\n—  AAAAAAA=\n").into(),
        format!("{TEXT}\n— PeterNeumann AAAAAAA\n").into(),
        format!("{TEXT}\n— PeterNeumann AAAAAAA= \n").into(),
        format!("{TEXT}\t\n{PETER_SIG}").into(),
    ];
    for msg in bad {
        assert!(Note::parse(&msg).is_err(), "{:?} parsed", String::from_utf8_lossy(&msg));
        assert!(open(&msg, &[&peter()]).is_err());
    }
}

#[test]
fn text_may_hold_blank_lines_and_dash_lines() {
    let signer = Signer::from_seed("example.com/key", &[9; 32]).unwrap();
    for text in ["\n", "a\n\nb\n", "a\n\n", "— x AAAAAAA=\n\n— y BBBBBBB=\n", "Ognuno sta solo\n\ned è subito sera.\n"]
    {
        let signed = sign(text, &[&signer]).unwrap();
        let opened = open(signed.as_bytes(), &[&signer.verifier()]).unwrap();
        assert_eq!(opened.note.text(), text);
        assert_eq!(opened.note.to_string(), signed);
    }
    for text in ["", "no newline", "a\x00\n", "tab\there\n", "cr\r\n"] {
        assert!(sign(text, &[&signer]).is_err(), "{text:?}");
        assert!(Note::new(text).is_err());
    }
    assert!(sign("x\n", &[]).is_err());
}

#[test]
fn round_trip_and_wrong_key() {
    let alice = Signer::from_seed("alice.example/log", &[1; 32]).unwrap();
    let bob = Signer::from_seed("bob.example/log", &[2; 32]).unwrap();
    let text = "hello\nworld\n";
    let signed = sign(text, &[&alice, &bob]).unwrap();
    let verifiers = [alice.verifier(), bob.verifier()];
    assert_eq!(open(signed.as_bytes(), &[&verifiers[0], &verifiers[1]]).unwrap().verified_by, vec![0, 1]);
    assert_eq!(Verifier::from_vkey(&alice.vkey()).unwrap(), verifiers[0]);

    // Alice's name with Bob's key has another key ID: the signature is unknown, so ignored.
    let impostor = Verifier::new("alice.example/log", *bob.verifier().public_key()).unwrap();
    assert_eq!(
        open(format!("{text}\n{}", alice.sign(text).unwrap().line()).as_bytes(), &[&impostor]),
        Err(NoteError::NoKnownSignature)
    );

    // A verifier that claims Alice's name and key ID but holds Bob's key fails the signature.
    struct Claiming(Verifier, u32);
    impl NoteVerifier for Claiming {
        fn name(&self) -> &str {
            "alice.example/log"
        }
        fn key_id(&self) -> u32 {
            self.1
        }
        fn verify(&self, text: &[u8], signature: &[u8]) -> bool {
            self.0.verify(text, signature)
        }
    }
    let claiming = Claiming(bob.verifier(), alice.key_id());
    assert!(matches!(open(signed.as_bytes(), &[&claiming]), Err(NoteError::InvalidSignature { .. })));

    // A tampered text fails.
    let tampered = signed.replacen("hello", "hullo", 1);
    assert!(matches!(open(tampered.as_bytes(), &[&verifiers[0]]), Err(NoteError::InvalidSignature { .. })));

    // Re-signing replaces the earlier signature by the same key.
    let mut note = Note::parse(signed.as_bytes()).unwrap();
    note.sign(&alice).unwrap();
    assert_eq!(note.signatures().len(), 2);
    assert_eq!(note.signatures()[1].name(), "alice.example/log");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Note::parse(&bytes);
        }

        #[test]
        fn any_valid_text_round_trips(lines in proptest::collection::vec("[^\\x00-\\x1f]{0,20}", 1..6)) {
            let text = lines.join("\n") + "\n";
            let signer = Signer::from_seed("prop.example", &[3; 32]).unwrap();
            let signed = sign(&text, &[&signer]).unwrap();
            let opened = open(signed.as_bytes(), &[&signer.verifier()]).unwrap();
            prop_assert_eq!(opened.note.text(), text.as_str());
        }
    }
}
