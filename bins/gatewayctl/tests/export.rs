//! `gatewayctl export` (INTERFACE.md §13) against a gateway served in-process on 127.0.0.1:0: the
//! books land in the file only when complete, members export only themselves, and bad dates are
//! refused before any request.

mod support;

use gateway_store::StoreSpec;
use serde_json::Value;
use support::{Member, ctl, gateway_on, ok};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_the_books_only_when_complete_and_members_only_their_own() {
    let (url, state) = gateway_on(&StoreSpec::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = Member::new(dir.path(), "admin").await;
    let baker = Member::new(dir.path(), "baker").await;
    ok(&admin.run(&url, &["login", "--scopes", "bootstrap"])).await;
    ok(&admin.run(&url, &["coop", "create", "--name", "Bakery"])).await;
    ok(&admin.run(&url, &["login", "--scopes", "all"])).await;
    ok(&admin.run(&url, &["coop", "add-member", &baker.did])).await;
    ok(&baker.run(&url, &["login"])).await;
    let memo = "rent \"May\"\n2020-01-01 open Assets:Evil";
    ok(&admin.run(&url, &["pay", &baker.did, "2.5", "--memo", memo])).await;
    ok(&admin.run(&url, &["pay", &baker.did, "0.000001"])).await;
    state.log.checkpoint(&gateway_core::CoopId::parse("bakery").unwrap()).await.unwrap();

    let csv = dir.path().join("books.csv");
    let said = ok(&admin.run(&url, &["export", "--format", "csv", "--output", csv.to_str().unwrap(), "--json"])).await;
    let said: Value = serde_json::from_str(&said).unwrap();
    let written = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(said["bytes"], written.len() as u64);
    assert!(written.starts_with("id,seq,log_index,timestamp,kind,from,to,amount,currency,memo,batch_id\r\n"));
    assert!(written.contains(",2.5,hours,\"rent \"\"May\"\"\n2020-01-01 open Assets:Evil\",\r\n"), "{written}");
    assert!(written.contains(",0.000001,hours,,\r\n"), "{written}");
    assert!(!dir.path().join("books.csv.partial").exists());

    let beancount = dir.path().join("books.beancount");
    ok(&admin.run(
        &url,
        &["export", "--format", "beancount", "--from", "2020-01-01", "--output", beancount.to_str().unwrap()],
    ))
    .await;
    let books = std::fs::read_to_string(&beancount).unwrap();
    assert!(books.contains("2.500000 HOURS") && books.contains("; End of the export: 2 transactions"), "{books}");

    // A member: the whole coop is refused, and nothing is left behind.
    let refused_file = dir.path().join("refused.csv");
    let refused =
        ctl(&baker.run(&url, &["export", "--format", "csv", "--output", refused_file.to_str().unwrap()])).await;
    assert_eq!(refused.status.code(), Some(1), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(!refused_file.exists() && !dir.path().join("refused.csv.partial").exists());
    let own = dir.path().join("own.journal");
    ok(&baker.run(&url, &["export", "--format", "hledger", "--member", &baker.did, "--output", own.to_str().unwrap()]))
        .await;
    assert!(std::fs::read_to_string(&own).unwrap().contains(" = 2.500001 hours"));

    // Dates and formats are checked before any request.
    for bad in [["--format", "xml", "--to", "2027-01-01"], ["--format", "csv", "--from", "2027-02-30"]] {
        let mut args = vec!["export", "--output", "x.csv"];
        args.extend(bad);
        let refused = ctl(&admin.run(&url, &args)).await;
        assert_eq!(refused.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&refused.stderr));
    }
}
