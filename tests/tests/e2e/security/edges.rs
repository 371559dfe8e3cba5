//! The smaller items of the review: a revoked agent stops, filter tests are bounded per host, refused
//! requests close their connection, API responses carry the security headers, logout by `GET` only
//! from the hub's own pages, and the generated admin password stays out of the logs.

mod filter_tests;
mod headers;
mod initial_password;
mod keep_alive;
mod logout;
mod revocation;
