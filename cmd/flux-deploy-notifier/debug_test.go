package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestDebugListenIsLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"":               true,
		"127.0.0.1:6060": true,
		"[::1]:6060":     true,
		"localhost:6060": true,
		"0.0.0.0:6060":   false,
		":6060":          false,
		"10.0.0.7:6060":  false,
		"example.com:80": false,
		"127.0.0.1":      false, // no port
	} {
		if err := checkDebugListen(addr); (err == nil) != ok {
			t.Errorf("--debug-listen %q: %v, want accepted %v", addr, err, ok)
		}
	}
	if _, err := parseServe([]string{"--hmac-token-file", "x", "--debug-listen", "0.0.0.0:6060"}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("serve took a debug listener on every interface: %v", err)
	}
}

func TestDebugHandlerServesProfiles(t *testing.T) {
	srv := httptest.NewServer(debugHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("%d %.200s", resp.StatusCode, body)
	}
}

// TestDebugHandlerKeepsTheCommandLine: the command line may hold a
// secret; the profiles' pages never show it.
func TestDebugHandlerKeepsTheCommandLine(t *testing.T) {
	srv := httptest.NewServer(debugHandler())
	defer srv.Close()
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, arg := range os.Args[1:] {
			if strings.Contains(string(body), arg) {
				t.Fatalf("%s shows the command line's %q", path, arg)
			}
		}
		if path == "/debug/pprof/cmdline" && resp.StatusCode == http.StatusOK {
			t.Fatalf("%s answered 200: %.200s", path, body)
		}
	}
}
