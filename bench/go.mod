module github.com/kdedup/kdedup/bench

go 1.26.8

replace github.com/kdedup/kdedup => ../

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/greatroar/blobloom v0.8.0
	github.com/kdedup/kdedup v0.0.0-00010101000000-000000000000
)

require github.com/bits-and-blooms/bitset v1.24.2 // indirect
