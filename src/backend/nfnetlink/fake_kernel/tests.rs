//! The fake kernel against the golden nft scripts and the real kernel's errnos.
