//! Config sets through the hub.
