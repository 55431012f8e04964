//! gateway-ws
