package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// chats stands in for Slack's Web API, a Teams webhook and a CloudEvents
// receiver in the fleet (-chats): it answers every request and keeps each
// commit's Slack headline, Teams cards and events, so that the run
// measures the service with every channel and checks that every verdict
// reached them. The contracts are the tests' (slacktest, teamstest,
// cloudeventtest); this only answers, fast.
type chats struct {
	URL string
	srv *http.Server

	mu       sync.Mutex
	seq      int
	headline map[string]string // Slack message ts -> its fallback text's first word and commit
	posts    int
	updates  int
	replies  int
	cards    int
	events   int
	applied  map[string]bool // commits whose Slack message says applied
	carded   map[string]bool // commits with a Teams card of applied
	evented  map[string]bool // commits with an applied event
}

func startChats() (*chats, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &chats{URL: "http://" + ln.Addr().String(), headline: map[string]string{},
		applied: map[string]bool{}, carded: map[string]bool{}, evented: map[string]bool{}}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serve), ReadHeaderTimeout: 10 * time.Second}
	go c.srv.Serve(ln)
	return c, nil
}

func (c *chats) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r.URL.Path {
	case "/api/chat.postMessage", "/api/chat.update":
		_ = r.ParseForm()
		text := r.PostForm.Get("text") // "Applied 0123456 on prod"
		ts := r.PostForm.Get("ts")
		switch {
		case r.PostForm.Get("thread_ts") != "":
			c.replies++
		case ts == "":
			c.seq++
			ts = fmt.Sprintf("1765000000.%06d", c.seq)
			c.posts++
		default:
			c.updates++
		}
		if f := strings.Fields(text); len(f) >= 2 && r.PostForm.Get("thread_ts") == "" {
			c.headline[ts] = f[0]
			if f[0] == "Applied" {
				c.applied[f[1]] = true
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": "CFLEET", "ts": ts})
	case "/teams":
		var post struct {
			Attachments []struct {
				Content struct {
					Body []struct {
						Inlines []struct{ Text string } `json:"inlines"`
					} `json:"body"`
				} `json:"content"`
			} `json:"attachments"`
		}
		_ = json.NewDecoder(r.Body).Decode(&post)
		if a := post.Attachments; len(a) == 1 && len(a[0].Content.Body) > 0 && len(a[0].Content.Body[0].Inlines) > 0 {
			if f := strings.Fields(a[0].Content.Body[0].Inlines[0].Text); len(f) >= 2 && f[0] == "Applied" {
				c.carded[f[1]] = true
			}
		}
		c.cards++
		w.WriteHeader(http.StatusAccepted)
	case "/hook":
		var e struct {
			Type string `json:"type"`
			Data struct {
				Commit string `json:"commit"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&e)
		if strings.HasSuffix(e.Type, ".applied") && len(e.Data.Commit) >= 7 {
			c.evented[e.Data.Commit[:7]] = true
		}
		c.events++
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, r)
	}
}

// await waits until want commits are shown applied in each channel of
// in, for up to timeout; applied is the fewest of them.
func (c *chats) await(in map[string]bool, want int, timeout time.Duration) (applied int, waited time.Duration) {
	start := time.Now()
	for {
		c.mu.Lock()
		applied = want
		for name, shown := range map[string]map[string]bool{"slack": c.applied, "teams": c.carded, "webhook": c.evented} {
			if in[name] {
				applied = min(applied, len(shown))
			}
		}
		c.mu.Unlock()
		if applied >= want || time.Since(start) > timeout {
			return applied, time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// counts are the requests each channel took.
func (c *chats) counts() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("slack %d messages, %d updates, %d replies; teams %d cards; webhook %d events", c.posts, c.updates, c.replies, c.cards, c.events)
}
