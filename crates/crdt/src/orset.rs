//! Add-wins observed-remove set.
