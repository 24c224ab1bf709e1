//! Random secrets: the Swank secret of a local image and the evaluation
//! channel's token.

use std::io::Read;

use crate::image::ImageError;

pub(super) fn random_secret() -> Result<String, ImageError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ImageError::StartFailed(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
