//! The replaying server: [`Fault::replay`] re-sends a response the client
//! already has, same `response_id`, even after a release freed it; the
//! firing log says when.

use spark_connect_retry::proto;
use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_testkit::{Fault, Rpc, TestServer};

use crate::{client, column, drain, exec, is_complete, range_plan, reattach, release};

/// A server that ends every stream after three responses, one row per batch,
/// no schema response (batches only, so positions are rows).
async fn server() -> TestServer {
    TestServer::builder()
        .schema_response(false)
        .rows_per_batch(1)
        .max_responses_per_stream(3)
        .start()
        .await
        .unwrap()
}

fn start_offset(r: &proto::ExecutePlanResponse) -> Option<i64> {
    match &r.response_type {
        Some(ResponseType::ArrowBatch(b)) => b.start_offset,
        _ => None,
    }
}

#[tokio::test]
async fn a_reattach_first_gets_the_response_it_acknowledged_again() {
    let server = server().await;
    server.faults().push(Fault::replay());
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let (first, end) = drain(
        c.execute_plan(exec(range_plan(None, 6, 1), true, Some(&op)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    assert_eq!(first.len(), 3, "a graceful end after three responses");
    let acked = first[2].clone();
    // The client acknowledges what it has: the server frees it.
    c.release_execute(release(&op, Some(&acked.response_id)))
        .await
        .unwrap();
    assert!(server.faults().fired().is_empty(), "not fired yet");

    let (again, end) = drain(
        c.reattach_execute(reattach(&op, Some(&acked.response_id)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    // The released response comes back first, byte for byte, then the
    // stream goes on after it.
    assert_eq!(again.len(), 4, "the replay, then three responses");
    assert_eq!(again[0].response_id, acked.response_id);
    assert_eq!(again[0].response_type, acked.response_type);
    assert_eq!(start_offset(&again[0]), Some(2));
    assert_eq!(start_offset(&again[1]), Some(3));
    assert_ne!(again[1].response_id, acked.response_id);
    // A client that took the replay would hold row 2 twice.
    let mut taken = first.clone();
    taken.extend(again[1..].iter().cloned());
    assert_eq!(column(&taken, 0), (0..6).collect::<Vec<_>>());

    let fired = server.faults().fired();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].rpc, Rpc::ReattachExecute);
    assert_eq!(fired[0].what, "replay of the last response sent");
    assert_eq!(server.faults().fired().len(), 1);
    assert_eq!(server.faults().pending(), 0, "spent");

    // The next reattach is not replayed: the fault fired once.
    let last = again.last().unwrap().response_id.clone();
    let (rest, end) = drain(
        c.reattach_execute(reattach(&op, Some(&last)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    assert!(is_complete(rest.last().unwrap()));
    assert!(rest.iter().all(|r| r.response_id != last));
    server.shutdown().await;
}

#[tokio::test]
async fn after_responses_replays_the_streams_own_last_response() {
    let server = server().await;
    server
        .faults()
        .push(Fault::replay().on(Rpc::ExecutePlan).after_responses(2));
    let mut c = client(&server).await;
    let (resps, end) = drain(
        c.execute_plan(exec(range_plan(None, 6, 1), true, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    // Two responses, the second again, then the third (the graceful end
    // counts only new responses).
    let ids: Vec<&str> = resps.iter().map(|r| r.response_id.as_str()).collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(ids[1], ids[2], "the second response, replayed");
    assert_eq!(
        resps.iter().map(start_offset).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(1), Some(2)]
    );
    assert_eq!(server.faults().fired()[0].rpc, Rpc::ExecutePlan);
    server.shutdown().await;
}

#[tokio::test]
async fn nothing_to_replay_before_the_first_response() {
    let server = server().await;
    server.faults().push(Fault::replay());
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    drop(
        c.execute_plan(exec(range_plan(None, 6, 1), true, Some(&op)))
            .await
            .unwrap(),
    );
    // A reattach from the start (no last_response_id) has nothing before
    // its position: the fault fires and sends nothing extra.
    let (resps, end) = drain(
        c.reattach_execute(reattach(&op, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    assert_eq!(
        resps.iter().map(start_offset).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2)]
    );
    assert_eq!(server.faults().fired().len(), 1);
    server.shutdown().await;
}
