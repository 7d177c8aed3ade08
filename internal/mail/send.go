package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
	"golang.org/x/sys/unix"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fsync"
)

// Sender delivers a burst of messages and says, per message, whether it
// went out (nil) and, if not, whether a retry may succeed: done is called
// with each outcome as soon as it is final, before the next message goes
// where they go one by one, so that the dispatcher records each before
// the next: a crash repeats at most the one under way.
type Sender interface {
	SendEach(ctx context.Context, msgs []Rendered, done func(i int, r Result))
}

// sendAll is SendEach's outcomes, in order.
func sendAll(s Sender, ctx context.Context, msgs []Rendered) []Result {
	res := make([]Result, len(msgs))
	s.SendEach(ctx, msgs, func(i int, r Result) { res[i] = r })
	return res
}

// Result is the outcome of one message.
type Result struct {
	Err   error
	Retry bool // transient: dial, TLS, timeout, SMTP 4xx
	// Untried: ctx ended before this message's turn; it waits, unchanged,
	// for the next burst.
	Untried bool
}

// build makes the MIME message: text and HTML alternatives, the date the
// mail became due and a Message-ID derived from its de-duplication key.
func build(from string, r Rendered) (*gomail.Msg, error) {
	m := gomail.NewMsg()
	if err := m.From(from); err != nil {
		return nil, fmt.Errorf("from address: %w", err)
	}
	if err := m.To(r.To); err != nil {
		return nil, fmt.Errorf("recipient %q: %w", r.To, err)
	}
	m.Subject(r.Subject)
	m.SetDateWithValue(r.Date)
	m.SetMessageIDWithValue(r.MessageID)
	m.SetGenHeader("Auto-Submitted", "auto-generated")
	m.SetBodyString(gomail.TypeTextPlain, r.Text)
	m.AddAlternativeString(gomail.TypeTextHTML, r.HTML)
	return m, nil
}

// SMTPConfig configures the SMTP sender.
type SMTPConfig struct {
	Host     string
	Port     int
	TLS      string // starttls, tls or none
	Auth     string // plain, login, cram-md5 or none
	Username string
	Password string
	From     string
	// TLSConfig overrides the TLS settings (tests trust their own CA).
	TLSConfig *tls.Config
	Timeout   time.Duration
}

// SMTP sends through one connection per burst with go-mail.
type SMTP struct {
	cfg  SMTPConfig
	opts []gomail.Option
}

// NewSMTP validates cfg and returns the sender.
func NewSMTP(cfg SMTPConfig) (*SMTP, error) {
	opts := []gomail.Option{gomail.WithPort(cfg.Port), gomail.WithTimeout(cmp(cfg.Timeout, 30*time.Second))}
	switch cfg.TLS {
	case "starttls", "":
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	case "tls":
		opts = append(opts, gomail.WithSSL())
	case "none":
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	default:
		return nil, fmt.Errorf("smtp tls %q: want starttls, tls or none", cfg.TLS)
	}
	if cfg.TLSConfig != nil {
		opts = append(opts, gomail.WithTLSConfig(cfg.TLSConfig))
	}
	switch strings.ToLower(cfg.Auth) {
	case "none", "":
	case "plain":
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthPlain))
	case "login":
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthLogin))
	case "cram-md5":
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthCramMD5))
	default:
		return nil, fmt.Errorf("smtp auth %q: want plain, login, cram-md5 or none", cfg.Auth)
	}
	if cfg.Auth != "" && cfg.Auth != "none" {
		opts = append(opts, gomail.WithUsername(cfg.Username), gomail.WithPassword(cfg.Password))
	}
	if _, err := gomail.NewClient(cfg.Host, opts...); err != nil {
		return nil, fmt.Errorf("smtp client: %w", err)
	}
	return &SMTP{cfg: cfg, opts: opts}, nil
}

func cmp(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Send is SendEach's outcomes, in order.
func (s *SMTP) Send(ctx context.Context, msgs []Rendered) []Result { return sendAll(s, ctx, msgs) }

// SendEach dials once and sends every message over that connection.
func (s *SMTP) SendEach(ctx context.Context, msgs []Rendered, done func(i int, r Result)) {
	built := make([]*gomail.Msg, len(msgs))
	for i, r := range msgs {
		m, err := build(s.cfg.From, r)
		if err != nil {
			done(i, Result{Err: err}) // a bad address does not get better
			continue
		}
		built[i] = m
	}
	c, err := gomail.NewClient(s.cfg.Host, s.opts...)
	if err == nil {
		err = c.DialWithContext(ctx)
	}
	if err != nil {
		// Nothing was sent: dial, TLS, timeouts and even a refused login
		// (fixed by configuration) leave every mail to a later try.
		for i := range built {
			if built[i] != nil {
				done(i, Result{Err: fmt.Errorf("connect to %s: %w", s.cfg.Host, err), Retry: true})
			}
		}
		return
	}
	defer c.Close()
	for i, m := range built {
		if m == nil {
			continue
		}
		// Stopping: the message under way was let finish (go-mail sends
		// without a context, each step bounded by the timeout); the rest
		// wait for the next start.
		if ctx.Err() != nil {
			done(i, Result{Untried: true})
			continue
		}
		if err := c.Send(m); err != nil {
			done(i, Result{Err: err, Retry: transient(err)})
			// After a failed transaction, start the next one clean.
			_ = c.Reset()
			continue
		}
		done(i, Result{})
	}
}

// transient decides retryability of a failed message where it is known:
// an SMTP 4xx reply or a broken connection may pass on a later try; a 5xx
// reply or a message go-mail cannot address will not.
func transient(err error) bool {
	var se *gomail.SendError
	if errors.As(err, &se) {
		if code := se.ErrorCode(); code != 0 {
			return code < 500
		}
		return se.Reason != gomail.ErrGetSender && se.Reason != gomail.ErrGetRcpts && se.Reason != gomail.ErrNoUnencoded
	}
	var tp *textproto.Error
	if errors.As(err, &tp) {
		return tp.Code < 500
	}
	return true
}

// Dir writes each mail as an .eml file: the embedded default when no SMTP
// server is configured. The file name derives from the Message-ID, so a
// resend after a crash rewrites the same file.
type Dir struct {
	dir  string
	from string
	// syncDir makes a burst's renames durable: fsync.Dir, which a test
	// replaces to see when it runs and to make it fail.
	syncDir func(dir string) error
}

// NewDir creates dir if needed.
func NewDir(dir, from string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mail dir: %w", err)
	}
	return &Dir{dir: dir, from: from, syncDir: fsync.Dir}, nil
}

// Send is SendEach's outcomes, in order.
func (d *Dir) Send(ctx context.Context, msgs []Rendered) []Result { return sendAll(d, ctx, msgs) }

// SendEach writes every message; failures to write are transient. The
// directory is synced once for the burst, after its renames: until then no
// message of it is reported sent (a crash before rewrites the same files).
func (d *Dir) SendEach(_ context.Context, msgs []Rendered, done func(i int, r Result)) {
	res := make([]Result, len(msgs))
	var written []int
	for i, r := range msgs {
		m, err := build(d.from, r)
		if err != nil {
			res[i] = Result{Err: err}
			continue
		}
		name := r.Date.UTC().Format("20060102T150405Z") + "-" + strings.SplitN(r.MessageID, "@", 2)[0] + ".eml"
		if err := writeAtomic(filepath.Join(d.dir, name), m); err != nil {
			res[i] = Result{Err: err, Retry: true}
			continue
		}
		written = append(written, i)
	}
	if len(written) > 0 {
		if err := d.syncDir(d.dir); err != nil {
			for _, i := range written {
				res[i] = Result{Err: fmt.Errorf("sync mail dir: %w", err), Retry: true}
			}
		}
	}
	for i, r := range res {
		done(i, r)
	}
}

// writeAtomic writes m to path through a temporary file, synced before the
// rename, so that once Send has synced the directory a mail the outbox then
// marks sent is on disk. Its pages are dropped from the page cache: the service
// never reads a mail back, and in a pod they count against its memory
// limit, where they pushed out the store's own pages (make bench-fleet: 577
// MB of mail in 20 days, a settled lookup in five a major page fault).
func writeAtomic(path string, m *gomail.Msg) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mail-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := m.WriteTo(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	// Advice only: a failure leaves the pages to the kernel's reclaim.
	_ = unix.Fadvise(int(tmp.Fd()), 0, 0, unix.FADV_DONTNEED)
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
