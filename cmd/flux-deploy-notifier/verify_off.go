//go:build !fdn_verify

package main

// verifyEvaluation is on in binaries built with -tags fdn_verify (the
// crash test's and make e2e's): after every batch the engine checks each
// live view against a full evaluation and crashes on a difference, which
// costs a full evaluation of every live rollout per batch.
const verifyEvaluation = false
