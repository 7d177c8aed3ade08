//go:build fdn_verify

package main

// verifyEvaluation: see verify_off.go.
const verifyEvaluation = true
