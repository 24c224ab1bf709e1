//! Opening the evaluation channel (`direct.rs`) of a fresh local image.

use std::time::Duration;

use swank_client::{lisp_string, RexOutcome, SwankClient, SwankError, Thread};

use crate::image::direct::{Address, DirectChannel};

use super::secret::random_secret;

/// Opens the evaluation channel (`lisp/direct.lisp`) of a freshly started
/// image: its serving thread's id and the connected channel, or `None`
/// (logged) when this Lisp cannot, so evaluations use a Swank worker.
pub(super) async fn open_direct(client: &SwankClient) -> Option<(DirectChannel, i64)> {
    let token = random_secret().ok()?;
    // The abstract socket's name is public (/proc/net/unix); the token is
    // what proves the server.
    let local = format!(
        "cl-mcp-eval-{}-{}",
        std::process::id(),
        &random_secret().ok()?[..12]
    );
    let form = format!(
        "(cl-mcp-server::start-direct-channel {} :local {})",
        lisp_string(&token),
        lisp_string(&local)
    );
    let opened = async {
        let v = match client.rex(&form, "COMMON-LISP-USER", Thread::T).await? {
            RexOutcome::Ok(v) => v,
            RexOutcome::Abort(why) => {
                return Err(SwankError::Protocol(
                    why.unwrap_or_else(|| "aborted".into()),
                ))
            }
        };
        let (address, thread) = match v.as_list() {
            Some([a, t]) => (
                match (a.as_str(), a.as_i64().and_then(|p| u16::try_from(p).ok())) {
                    (Some(name), _) if name == local => Some(Address::Local(local.clone())),
                    (_, Some(port)) => Some(Address::Port(port)),
                    _ => None,
                },
                t.as_i64(),
            ),
            _ => (None, None),
        };
        let (Some(address), Some(thread)) = (address, thread) else {
            return Err(SwankError::Protocol(format!("unexpected answer {v}")));
        };
        let ch = DirectChannel::connect(&address, &token).await?;
        Ok::<_, SwankError>((ch, thread))
    };
    match tokio::time::timeout(Duration::from_secs(10), opened).await {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "no evaluation channel; evaluations go through Swank");
            None
        }
        Err(_) => {
            tracing::warn!(
                "the evaluation channel did not open within 10 s; evaluations go through Swank"
            );
            None
        }
    }
}
