use super::*;
use crate::cosignature::Cosigner;
use crate::hash::leaf_hash;
use crate::note::Signer;

const ORIGIN: &str = "example.com/log";

fn log_signer() -> Signer {
    Signer::from_seed(ORIGIN, &[1; 32]).unwrap()
}

fn witness(i: u8) -> Cosigner {
    Cosigner::from_seed(&format!("w{i}.example"), &[10 + i; 32]).unwrap()
}

/// The two-level example of C2SP tlog-policy, with real keys.
fn example_policy() -> String {
    let w = |i: u8| witness(i).vkey();
    format!(
        "log {}\n\nwitness X1 {}\nwitness X2 {}\nwitness X3 {}\ngroup X-witnesses 2 X1 X2 X3\n\n\
         witness Y1 {}\nwitness Y2 {}\nwitness Y3 {}\ngroup Y-witnesses any Y1 Y2 Y3\n\n\
         group X-and-Y all X-witnesses Y-witnesses\nquorum X-and-Y\n",
        log_signer().vkey(),
        w(1),
        w(2),
        w(3),
        w(4),
        w(5),
        w(6)
    )
}

#[test]
fn parses_the_spec_example() {
    let policy = Policy::parse(example_policy().as_bytes()).unwrap();
    assert_eq!(policy.logs().len(), 1);
    assert_eq!(policy.logs()[0].verifier().vkey(), log_signer().vkey());
    assert_eq!(policy.logs()[0].url(), None);
    assert_eq!(policy.witnesses().len(), 6);
    assert_eq!(policy.witnesses()[3].name(), b"Y1");
    assert_eq!(policy.witnesses()[3].verifier(), &witness(4).verifier());
    assert_eq!(policy.groups().len(), 3);
    assert_eq!(policy.groups()[0].name(), b"X-witnesses");
    assert_eq!(policy.groups()[0].threshold(), 2);
    assert_eq!(policy.groups()[0].members(), [Member::Witness(0), Member::Witness(1), Member::Witness(2)]);
    assert_eq!(policy.groups()[1].threshold(), 1);
    assert_eq!(policy.groups()[2].threshold(), 2);
    assert_eq!(policy.groups()[2].members(), [Member::Group(0), Member::Group(1)]);
    assert_eq!(policy.quorum(), Quorum::Member(Member::Group(2)));

    let q = |set: &[usize]| {
        let mut witnessed = [false; 6];
        for i in set {
            witnessed[*i] = true;
        }
        policy.quorum_satisfied(&witnessed)
    };
    assert!(q(&[0, 1, 3]));
    assert!(q(&[0, 2, 5]));
    assert!(q(&[0, 1, 2, 3, 4, 5]));
    assert!(!q(&[0, 3, 4, 5]), "one X witness is not enough");
    assert!(!q(&[0, 1, 2]), "no Y witness");
    assert!(!q(&[]));
    assert!(!policy.quorum_satisfied(&[]));
}

#[test]
fn syntax_details() {
    let log = log_signer().vkey();
    let w1 = witness(1).vkey();
    let text = format!(
        "  # a comment\n\t#another\n\nlog\t{log}   https://log.example/\n witness  a {w1} https://w.example/\t\nquorum a \n"
    );
    let policy = Policy::parse(text.as_bytes()).unwrap();
    assert_eq!(policy.logs()[0].url(), Some(&b"https://log.example/"[..]));
    assert_eq!(policy.witnesses()[0].url(), Some(&b"https://w.example/"[..]));
    assert_eq!(policy.quorum(), Quorum::Member(Member::Witness(0)));
    assert!(policy.quorum_satisfied(&[true]));
    assert!(!policy.quorum_satisfied(&[false]));

    // No final newline; `quorum none`; a policy without logs; non-UTF-8 names are opaque bytes.
    let policy = Policy::parse(format!("witness \u{212a} {w1}\nquorum none").as_bytes()).unwrap();
    assert_eq!(policy.quorum(), Quorum::None);
    assert!(policy.quorum_satisfied(&[]));
    assert!(policy.logs().is_empty());
    let mut bytes = b"witness K\xff ".to_vec();
    bytes.extend_from_slice(w1.as_bytes());
    bytes.extend_from_slice(b"\ngroup g any K\xff\nquorum g\n");
    let policy = Policy::parse(&bytes).unwrap();
    assert_eq!(policy.witnesses()[0].name(), b"K\xff");
    // "K" and the Kelvin sign are different names.
    let kelvin = format!("witness \u{212a} {w1}\ngroup g any K\nquorum g\n");
    assert!(matches!(Policy::parse(kelvin.as_bytes()), Err(PolicyError::Line { line: 2, .. })));
    // Witness and group names that are keywords are fine: the grammar is positional.
    let policy = Policy::parse(format!("witness any {w1}\ngroup all all any\nquorum all\n").as_bytes()).unwrap();
    assert_eq!(policy.groups()[0].members(), [Member::Witness(0)]);
}

#[test]
fn rejects_invalid_policies() {
    let log = log_signer().vkey();
    let (w1, w2, w3) = (witness(1).vkey(), witness(2).vkey(), witness(3).vkey());
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "no quorum"),
        (format!("log {log}\n"), "no quorum"),
        ("quorum none\nquorum none\n".into(), "two quorums"),
        ("quorum a\n".into(), "undefined quorum"),
        (format!("quorum a\nwitness a {w1}\n"), "quorum before its witness"),
        (format!("witness a {w1}\ngroup g 1 b\nquorum g\n"), "undefined member"),
        (format!("group g 1 a\nwitness a {w1}\nquorum g\n"), "member defined later"),
        (format!("witness a {w1}\nwitness a {w2}\nquorum a\n"), "duplicate witness name"),
        (format!("witness a {w1}\ngroup a any a\nquorum a\n"), "group named like a witness"),
        (format!("witness a {w1}\nwitness b {w1}\nquorum a\n"), "duplicate witness key"),
        (format!("log {log}\nlog {log}\nquorum none\n"), "duplicate log key"),
        (
            format!("log {log}\nlog {}\nquorum none\n", Signer::from_seed("other.example", &[1; 32]).unwrap().vkey()),
            "same log key under another name",
        ),
        (format!("witness none {w1}\nquorum none\n"), "witness named none"),
        (format!("witness a {w1}\ngroup none any a\nquorum none\n"), "group named none"),
        (format!("witness a {w1}\ngroup g any a none\nquorum g\n"), "none as a member"),
        (format!("witness a {w1}\ngroup g 0 a\nquorum g\n"), "threshold 0"),
        (format!("witness a {w1}\ngroup g 2 a\nquorum g\n"), "threshold above n"),
        (format!("witness a {w1}\ngroup g -1 a\nquorum g\n"), "negative threshold"),
        (format!("witness a {w1}\ngroup g +1 a\nquorum g\n"), "signed threshold"),
        (format!("witness a {w1}\ngroup g some a\nquorum g\n"), "word threshold"),
        (format!("witness a {w1}\ngroup g 99999999999999999999999 a\nquorum g\n"), "huge threshold"),
        (format!("witness a {w1}\ngroup g any\nquorum g\n"), "no members"),
        (format!("witness a {w1}\ngroup g any a a\nquorum g\n"), "member listed twice"),
        (format!("witness a {w1}\nwitness b {w2}\ngroup g any a\ngroup h any a b\nquorum h\n"), "member of two groups"),
        (format!("witness a {w1}\ngroup g any a\ngroup h any g\ngroup i any g\nquorum i\n"), "group in two groups"),
        (format!("log {w1}\nquorum none\n"), "cosigner key as a log key"),
        (format!("witness a {log}\nquorum a\n"), "log key as a witness key"),
        (format!("witness a {w1} url extra\nquorum a\n"), "too many items"),
        (format!("log {log} url extra\nquorum none\n"), "too many log items"),
        ("log\nquorum none\n".into(), "log without key"),
        ("witness a\nquorum a\n".into(), "witness without key"),
        (format!("witness a {}\nquorum a\n", &w3[..w3.len() - 2]), "truncated vkey"),
        ("log example.com+00000000+AQ==\nquorum none\n".into(), "bad vkey"),
        (format!("quorum none extra\nlog {log}\n"), "quorum with two names"),
        (format!("logs {log}\nquorum none\n"), "unknown keyword"),
        (format!("log {log} # trailing comment\nquorum none\n"), "a comment is a whole line"),
        (format!("log {log}\r\nquorum none\n"), "carriage return"),
        (format!("log {log}\nquorum none\x0b\n"), "vertical tab"),
        (format!("log {log}\nquorum none\x7f\n"), "delete"),
        (format!("log {log}\nquorum\x00none\n"), "NUL"),
    ];
    for (text, why) in cases {
        assert!(Policy::parse(text.as_bytes()).is_err(), "{why}: {text:?} parsed");
    }
    assert_eq!(Policy::parse(b"quorum none\r\n"), Err(PolicyError::Byte { offset: 11, byte: b'\r' }));
    assert_eq!(Policy::parse(b"# nothing\n"), Err(PolicyError::NoQuorum));
    assert!(matches!(Policy::parse(b"quorum x\n"), Err(PolicyError::Line { line: 1, .. })));
}

#[test]
fn nested_groups_k_of_n() {
    // Three organisations of three witnesses each; two organisations must each have two
    // witnesses cosigning; one extra independent witness may stand in for an organisation.
    let mut text = format!("log {}\n", log_signer().vkey());
    for i in 0..10u8 {
        text += &format!("witness w{i} {}\n", witness(i).vkey());
    }
    text += "group org0 2 w0 w1 w2\ngroup org1 2 w3 w4 w5\ngroup org2 all w6 w7 w8\n";
    text += "group orgs 2 org0 org1 org2 w9\nquorum orgs\n";
    let policy = Policy::parse(text.as_bytes()).unwrap();
    let q = |set: &[usize]| {
        let mut witnessed = [false; 10];
        for i in set {
            witnessed[*i] = true;
        }
        policy.quorum_satisfied(&witnessed)
    };
    assert!(q(&[0, 1, 3, 4]));
    assert!(q(&[0, 2, 9]));
    assert!(q(&[6, 7, 8, 9]));
    assert!(!q(&[6, 7, 9]), "org2 needs all three");
    assert!(!q(&[0, 3, 6, 9]), "one witness of each organisation is not enough");
    assert!(!q(&[0, 1, 2]));
    assert!(!q(&[9]));
}

fn signed_checkpoint(cosigners: &[u8]) -> Note {
    let checkpoint = Checkpoint::new(ORIGIN, 10, leaf_hash(b"root")).unwrap();
    let mut note = Note::new(checkpoint.to_text()).unwrap();
    note.sign(&log_signer()).unwrap();
    for i in cosigners {
        note.add_signature(witness(*i).cosign(&checkpoint, 1_700_000_000 + u64::from(*i)).unwrap()).unwrap();
    }
    note
}

#[test]
fn verifies_checkpoints() {
    let policy = Policy::parse(example_policy().as_bytes()).unwrap();
    let verified = policy.verify_checkpoint(&signed_checkpoint(&[1, 3, 5])).unwrap();
    assert_eq!(verified.log, 0);
    assert_eq!(verified.checkpoint.size(), 10);
    assert_eq!(
        verified.cosignatures,
        vec![
            WitnessCosignature { witness: 0, timestamp: 1_700_000_001 },
            WitnessCosignature { witness: 2, timestamp: 1_700_000_003 },
            WitnessCosignature { witness: 4, timestamp: 1_700_000_005 },
        ]
    );
    assert_eq!(policy.verify_checkpoint(&signed_checkpoint(&[1, 4, 5])), Err(CheckpointVerifyError::QuorumNotMet));
    assert_eq!(policy.verify_checkpoint(&signed_checkpoint(&[])), Err(CheckpointVerifyError::QuorumNotMet));
    // Cosignatures by unknown witnesses are ignored.
    assert_eq!(
        policy.verify_checkpoint(&signed_checkpoint(&[1, 4, 7, 8, 9])),
        Err(CheckpointVerifyError::QuorumNotMet)
    );

    // Without the log's signature.
    let checkpoint = Checkpoint::new(ORIGIN, 10, leaf_hash(b"root")).unwrap();
    let mut unsigned = Note::new(checkpoint.to_text()).unwrap();
    for i in [1, 2, 4] {
        unsigned.add_signature(witness(i).cosign(&checkpoint, 5).unwrap()).unwrap();
    }
    assert_eq!(policy.verify_checkpoint(&unsigned), Err(CheckpointVerifyError::NotSignedByLog));
    let mut by_stranger = Note::new(checkpoint.to_text()).unwrap();
    by_stranger.sign(&Signer::from_seed(ORIGIN, &[99; 32]).unwrap()).unwrap();
    assert_eq!(policy.verify_checkpoint(&by_stranger), Err(CheckpointVerifyError::NotSignedByLog));

    // Another origin.
    let other = Checkpoint::new("example.com/other", 10, leaf_hash(b"root")).unwrap();
    let mut note = Note::new(other.to_text()).unwrap();
    note.sign(&Signer::from_seed("example.com/other", &[1; 32]).unwrap()).unwrap();
    assert_eq!(policy.verify_checkpoint(&note), Err(CheckpointVerifyError::UnknownOrigin("example.com/other".into())));

    // A bad cosignature by a known witness rejects the checkpoint even if the quorum is met.
    let mut note = signed_checkpoint(&[1, 2, 4]);
    let forged = witness(5).cosign(&Checkpoint::new(ORIGIN, 11, leaf_hash(b"root")).unwrap(), 7).unwrap();
    note.add_signature(forged).unwrap();
    assert!(matches!(
        policy.verify_checkpoint(&note),
        Err(CheckpointVerifyError::Note(NoteError::InvalidSignature { .. }))
    ));

    // A policy without logs accepts nothing; `quorum none` needs only the log.
    let no_logs = Policy::parse(b"quorum none\n").unwrap();
    assert_eq!(no_logs.verify_checkpoint(&signed_checkpoint(&[])), Err(CheckpointVerifyError::NoLog));
    let log_only = Policy::parse(format!("log {}\nquorum none\n", log_signer().vkey()).as_bytes()).unwrap();
    assert!(log_only.verify_checkpoint(&signed_checkpoint(&[])).is_ok());

    // A note whose text is not a checkpoint.
    let mut prose = Note::new("hello\n").unwrap();
    prose.sign(&log_signer()).unwrap();
    assert!(matches!(log_only.verify_checkpoint(&prose), Err(CheckpointVerifyError::Checkpoint(_))));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_never_panics(text in "(log|witness|group|quorum|none|any|all|[0-9]|a|b|#| |\t|\n){0,40}") {
            let _ = Policy::parse(text.as_bytes());
        }
    }
}
