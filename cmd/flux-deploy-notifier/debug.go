package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// checkDebugListen checks --debug-listen: empty (off) or a loopback address.
// The Go runtime's profiles name the code's paths and may hold fragments
// of what it handles; on loopback they are reached only from the machine
// or the pod itself (kubectl port-forward), never from the network.
func checkDebugListen(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--debug-listen: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return errors.New("--debug-listen must be a loopback address (127.0.0.1:6060, [::1]:6060 or localhost:6060)")
	}
	return nil
}

// debugHandler serves net/http/pprof's handlers on a mux of its own: the
// package's side effect registers them on http.DefaultServeMux, which
// nothing here serves. Not its command line (pprof.Cmdline): a flag may
// carry a secret (a --postgres connection string with its password).
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug serves the profiles on addr until stop is called; a
// profile of 30 s must not be cut by a write timeout.
func serveDebug(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-listen: %w", err)
	}
	srv := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
