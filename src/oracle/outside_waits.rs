//! Whether a request waited on something outside the oracle and its store: a placement webhook.
//!
//! The replica's admission limit (`crate::rate_limit::admission`) judges how long its answers
//! take, to tell when it admits more than it can serve. A placement that waited seconds for a
//! cluster's slow webhook says nothing of that (the wait took neither CPU nor connections), and
//! must not make the replica refuse every other cluster's requests: such answers are not judged.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static WAITED: Cell<bool>;
}

/// Runs `call` (a request being served) and says whether it waited on an outside party.
pub async fn waited_outside<T>(call: impl Future<Output = T>) -> (T, bool) {
    WAITED
        .scope(Cell::new(false), async move {
            let output = call.await;
            (output, WAITED.with(Cell::get))
        })
        .await
}

/// Notes, for [`waited_outside`], that the request under way is about to wait on an outside
/// party. Outside a [`waited_outside`] scope (a background task), it does nothing.
pub fn note_waiting_outside() {
    let _ = WAITED.try_with(|waited| waited.set(true));
}
