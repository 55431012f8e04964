//! Signs a login challenge, for trying the gateway by hand.
//!
//! `cargo run -p gateway-auth --example sign -- <seed-hex>` prints the `did:key` and `did:icn` of
//! the Ed25519 key whose 32-byte secret seed is given; add the challenge's nonce as a second
//! argument to also print the hex signature over its UTF-8 bytes, as `/v1/auth/verify` expects.
//! Only for experiments: a real client keeps its seed in a key file (see `gatewayctl`).

use ed25519_dalek::{Signer, SigningKey};
use gateway_core::{Did, Ed25519PublicKey};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(seed) = args.first().and_then(|s| hex::decode(s).ok()).and_then(|b| <[u8; 32]>::try_from(b).ok()) else {
        eprintln!("usage: sign <32-byte seed as 64 hex chars> [nonce]");
        std::process::exit(2);
    };
    let signing = SigningKey::from_bytes(&seed);
    let public = Ed25519PublicKey(signing.verifying_key().to_bytes());
    println!("did:key   {}", Did::key_from_public_key(&public));
    println!("did:icn   {}", Did::icn_from_public_key(&public));
    if let Some(nonce) = args.get(1) {
        println!("signature {}", hex::encode(signing.sign(nonce.as_bytes()).to_bytes()));
    }
}
