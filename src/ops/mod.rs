//! What operators see: the admin port (`admin`), the metrics text it serves
//! (`metrics`), and the `gatewayd stats` client (`stats`).

pub mod admin;
pub mod cluster_metrics;
pub mod metrics;
pub mod rest_metrics;
pub mod stats;
