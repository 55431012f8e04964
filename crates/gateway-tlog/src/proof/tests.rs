use super::*;
use crate::cosignature::Cosigner;
use crate::hash::hash_to_base64;
use crate::note::Signer;
use crate::tree::{MemoryTree, inclusion_proof};

const ORIGIN: &str = "example.com/fancylog";

struct Fixture {
    tree: MemoryTree,
    log: Signer,
    witnesses: Vec<Cosigner>,
    policy: Policy,
}

fn entry(i: u64) -> Vec<u8> {
    format!("entry number {i}").into_bytes()
}

fn fixture() -> Fixture {
    let mut tree = MemoryTree::new();
    for i in 0..1000 {
        tree.append_entry(&entry(i));
    }
    let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let witnesses: Vec<Cosigner> =
        (1..=4u8).map(|i| Cosigner::from_seed(&format!("witness{i}.example"), &[i + 1; 32]).unwrap()).collect();
    let policy = format!(
        "log {}\nwitness w1 {}\nwitness w2 {}\nwitness w3 {}\nwitness w4 {}\ngroup three 3 w1 w2 w3 w4\nquorum three\n",
        log.vkey(),
        witnesses[0].vkey(),
        witnesses[1].vkey(),
        witnesses[2].vkey(),
        witnesses[3].vkey()
    );
    Fixture { tree, log, witnesses, policy: Policy::parse(policy.as_bytes()).unwrap() }
}

impl Fixture {
    fn signed_checkpoint(&self, size: u64, cosigners: &[usize]) -> Note {
        let checkpoint = Checkpoint::new(ORIGIN, size, self.tree.root_at(size).unwrap()).unwrap();
        let mut note = Note::new(checkpoint.to_text()).unwrap();
        note.sign(&self.log).unwrap();
        for i in cosigners {
            note.add_signature(self.witnesses[*i].cosign(&checkpoint, 1_750_000_000).unwrap()).unwrap();
        }
        note
    }

    fn proof(&self, index: u64, size: u64, cosigners: &[usize]) -> TlogProof {
        let hashes = inclusion_proof(index, size, &self.tree).unwrap();
        TlogProof::new(index, hashes, self.signed_checkpoint(size, cosigners)).unwrap()
    }
}

#[test]
fn layout_follows_the_spec() {
    let f = fixture();
    let proof = f.proof(5, 8, &[0, 1, 2]).with_extra(b"age-v1.2.1-darwin-arm64.tar.gz".to_vec());
    let text = proof.to_text();
    let hashes = inclusion_proof(5, 8, &f.tree).unwrap();
    let expected = format!(
        "c2sp.org/tlog-proof@v1\nextra {}\nindex 5\n{}\n{}\n{}\n\n{}",
        STANDARD.encode(b"age-v1.2.1-darwin-arm64.tar.gz"),
        hash_to_base64(&hashes[0]),
        hash_to_base64(&hashes[1]),
        hash_to_base64(&hashes[2]),
        proof.note()
    );
    assert_eq!(text, expected);
    assert!(text.contains(&format!("\n\n{ORIGIN}\n8\n")));
    assert!(text.ends_with('\n'));
    assert_eq!(text.matches("\n— ").count(), 4);
}

#[test]
fn round_trips_and_verifies() {
    let f = fixture();
    for (index, size) in [(0, 1), (0, 1000), (999, 1000), (500, 777), (255, 256), (256, 257)] {
        let proof = f.proof(index, size, &[0, 1, 2]);
        let text = proof.to_text();
        let parsed = TlogProof::parse(text.as_bytes()).unwrap();
        assert_eq!(parsed, proof);
        assert_eq!(parsed.to_text(), text);
        assert_eq!(parsed.index(), index);
        assert_eq!(parsed.extra(), None);
        assert_eq!(parsed.checkpoint().size(), size);
        let verified = verify(&parsed, &entry(index), &f.policy).unwrap();
        assert_eq!(verified.checkpoint.size(), size);
        assert_eq!(verified.log, 0);
        assert_eq!(verified.cosignatures.iter().map(|c| c.witness).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(verified.cosignatures.iter().all(|c| c.timestamp == 1_750_000_000));
    }
    let with_extra = f.proof(3, 10, &[1, 2, 3]).with_extra(vec![0, 1, 2, 255]);
    let parsed = TlogProof::parse(with_extra.to_text().as_bytes()).unwrap();
    assert_eq!(parsed.extra(), Some(&[0, 1, 2, 255][..]));
    assert_eq!(parsed, with_extra);
    assert!(parsed.verify(&entry(3), &f.policy).is_ok());
    let empty_extra = f.proof(3, 10, &[1, 2, 3]).with_extra(Vec::new());
    assert_eq!(TlogProof::parse(empty_extra.to_text().as_bytes()).unwrap().extra(), Some(&[][..]));
}

#[test]
fn verification_failures() {
    let f = fixture();
    let proof = f.proof(42, 100, &[0, 1, 3]);
    assert!(proof.verify(&entry(42), &f.policy).is_ok());
    assert!(proof.verify_leaf_hash(&leaf_hash(&entry(42)), &f.policy).is_ok());

    // Another entry.
    assert_eq!(proof.verify(&entry(43), &f.policy), Err(TlogProofError::Inclusion(VerifyError::RootMismatch)));
    assert!(matches!(proof.verify(b"", &f.policy), Err(TlogProofError::Inclusion(_))));
    // A proof hash flipped in the text.
    let text = proof.to_text();
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let mut hash = hash_from_base64(&lines[3]).unwrap();
    hash[0] ^= 1;
    lines[3] = hash_to_base64(&hash);
    let tampered = TlogProof::parse(lines.join("\n").as_bytes()).unwrap();
    assert_eq!(tampered.verify(&entry(42), &f.policy), Err(TlogProofError::Inclusion(VerifyError::RootMismatch)));
    // Another index.
    let moved = TlogProof::new(41, proof.inclusion().to_vec(), proof.note().clone()).unwrap();
    assert!(matches!(moved.verify(&entry(42), &f.policy), Err(TlogProofError::Inclusion(_))));
    let outside = TlogProof::new(100, proof.inclusion().to_vec(), proof.note().clone()).unwrap();
    assert_eq!(
        outside.verify(&entry(42), &f.policy),
        Err(TlogProofError::Inclusion(VerifyError::IndexOutOfRange { index: 100, size: 100 }))
    );
    // Two cosignatures where three are needed.
    let weak = f.proof(42, 100, &[0, 3]);
    assert_eq!(weak.verify(&entry(42), &f.policy), Err(TlogProofError::Policy(CheckpointVerifyError::QuorumNotMet)));
    // A tampered cosignature timestamp.
    let mut note = f.signed_checkpoint(100, &[0, 1]);
    let mut forged = f.witnesses[2].cosign(&Checkpoint::parse(note.text()).unwrap(), 1).unwrap().signature().to_vec();
    forged[7] = 2;
    note.add_signature(crate::note::Signature::new("witness3.example", f.witnesses[2].key_id(), forged).unwrap())
        .unwrap();
    let forged = TlogProof::new(42, proof.inclusion().to_vec(), note).unwrap();
    assert!(matches!(
        forged.verify(&entry(42), &f.policy),
        Err(TlogProofError::Policy(CheckpointVerifyError::Note(NoteError::InvalidSignature { .. })))
    ));
    // A checkpoint signed by another key under the log's name.
    let impostor = Signer::from_seed(ORIGIN, &[9; 32]).unwrap();
    let checkpoint = Checkpoint::parse(proof.note().text()).unwrap();
    let mut note = Note::new(checkpoint.to_text()).unwrap();
    note.sign(&impostor).unwrap();
    for w in &f.witnesses {
        note.add_signature(w.cosign(&checkpoint, 5).unwrap()).unwrap();
    }
    let unsigned = TlogProof::new(42, proof.inclusion().to_vec(), note).unwrap();
    assert_eq!(
        unsigned.verify(&entry(42), &f.policy),
        Err(TlogProofError::Policy(CheckpointVerifyError::NotSignedByLog))
    );
    // A policy for another log.
    let other = Signer::from_seed("example.com/other", &[1; 32]).unwrap();
    let other_policy = Policy::parse(format!("log {}\nquorum none\n", other.vkey()).as_bytes()).unwrap();
    assert!(matches!(
        proof.verify(&entry(42), &other_policy),
        Err(TlogProofError::Policy(CheckpointVerifyError::UnknownOrigin(_)))
    ));
}

#[test]
fn rejects_malformed_proofs() {
    let f = fixture();
    let good = f.proof(7, 20, &[0, 1, 2]).to_text();
    let note = f.signed_checkpoint(20, &[0]).to_string();
    let h = hash_to_base64(&[7; 32]);
    for bad in [
        String::new(),
        "c2sp.org/tlog-proof@v1".into(),
        "c2sp.org/tlog-proof@v1\n".into(),
        good.replacen("c2sp.org/tlog-proof@v1", "c2sp.org/tlog-proof@v2", 1),
        good.replacen("c2sp.org/tlog-proof@v1\n", "c2sp.org/tlog-proof@v1\r\n", 1),
        good.replacen("index 7", "index 07", 1),
        good.replacen("index 7", "index -7", 1),
        good.replacen("index 7", "index +7", 1),
        good.replacen("index 7", "index  7", 1),
        good.replacen("index 7", "index", 1),
        good.replacen("index 7", "Index 7", 1),
        good.replacen("index 7", "index 18446744073709551616", 1),
        good.replacen("index 7\n", "", 1),
        good.replacen("\n\n", "\n", 1),
        format!("c2sp.org/tlog-proof@v1\nextra !!\nindex 0\n\n{note}"),
        format!("c2sp.org/tlog-proof@v1\nextra AA\nindex 0\n\n{note}"),
        format!("c2sp.org/tlog-proof@v1\nindex 0\nextra AAAA\n\n{note}"),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n{}\n\n{note}", &h[..43]),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n{}\n\n{note}", hash_to_base64(&[0; 32]).repeat(2)),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n{}\n{note}", h),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n{}\n\n{note}", vec![h.as_str(); 65].join("\n")),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n\n{ORIGIN}\n20\n{h}\n"),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n\n{ORIGIN}\n20\n{h}\n\n"),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n\n{}", note.replacen("\n20\n", "\n020\n", 1)),
        format!("c2sp.org/tlog-proof@v1\nindex 0\n\nhello\n\n{}", note.lines().last().unwrap()),
    ] {
        assert!(TlogProof::parse(bad.as_bytes()).is_err(), "{bad:?} parsed");
    }
    assert!(
        TlogProof::parse(
            format!("c2sp.org/tlog-proof@v1\nindex 0\n{}\n\n{note}", vec![h.as_str(); 64].join("\n")).as_bytes()
        )
        .is_ok()
    );
    assert!(TlogProof::parse(&[good.as_bytes(), b"\xff"].concat()).is_err());
    assert!(TlogProof::new(0, vec![[0; 32]; 65], f.signed_checkpoint(20, &[])).is_err());
    assert!(TlogProof::new(0, vec![], Note::new(format!("{ORIGIN}\n20\n{h}\n")).unwrap()).is_err());
}
