//! Credentials as values: compared and hashed, never shown.

use std::fmt;

/// A credential: compared and hashed, never shown (`Debug` prints `***`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for comparing and hashing only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Long enough not to be guessed, and one token (no white space or control characters).
    pub fn is_strong(&self) -> bool {
        (24..=512).contains(&self.0.len()) && self.0.chars().all(|c| c.is_ascii_graphic())
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self(value.trim().to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}
