package kafkaio

// What only the tests use of kafkaio.

// Reauthentications returns how many times connections of this process re-authenticated their
// SASL session (KIP-368). It is safe for concurrent use.
func Reauthentications() int64 { return reauthentications.Load() }
