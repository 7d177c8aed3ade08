// Package smtptest runs a real SMTP server (github.com/emersion/go-smtp) on
// loopback for tests, recording what it accepts.
package smtptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Options configure the server. The zero value is plain SMTP without
// authentication.
type Options struct {
	// STARTTLS offers STARTTLS with a self-signed certificate for 127.0.0.1;
	// Server.ClientTLS trusts it.
	STARTTLS bool
	// User and Password, when set, make AUTH PLAIN required before MAIL.
	User, Password string
}

// Message is an accepted message and its envelope.
type Message struct {
	*mail.Message
	Raw  string
	From string
	To   []string
}

// Part is the decoded body of the message's first MIME part of mediaType
// (text/plain, text/html), or of the whole message when it is not
// multipart and of that type.
func (m Message) Part(mediaType string) (string, error) {
	msg, err := mail.ReadMessage(strings.NewReader(m.Raw))
	if err != nil {
		return "", err
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(mt, "multipart/") {
		if mt != mediaType {
			return "", fmt.Errorf("no %s part: the message is %s", mediaType, mt)
		}
		b, err := io.ReadAll(msg.Body)
		return string(b), err
	}
	r := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := r.NextPart()
		if err != nil {
			return "", fmt.Errorf("no %s part: %w", mediaType, err)
		}
		if pt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type")); pt == mediaType {
			b, err := io.ReadAll(p) // NextPart undoes quoted-printable
			return string(b), err
		}
	}
}

// Server is a running SMTP server. Recipients ending in @invalid.example are
// refused with 550.
type Server struct {
	Addr      string // 127.0.0.1:port
	Port      int
	ClientTLS *tls.Config // trusts the server's certificate

	t    testing.TB
	opts Options
	cert tls.Certificate
	srv  *smtp.Server
	ln   net.Listener

	mu       sync.Mutex
	received []Message
	conns    map[*smtp.Conn]bool
	fail     func(n int) error
	n        int
}

// Reply451 and Reply554 are a transient and a permanent refusal.
var (
	Reply451 = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	Reply554 = &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "message refused"}
)

// Start listens on a free loopback port until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, opts: opts}
	if opts.STARTTLS {
		var pool *x509.CertPool
		s.cert, pool = selfSigned(t)
		s.ClientTLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	s.Port = ln.Addr().(*net.TCPAddr).Port
	s.serve(ln)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(ln net.Listener) {
	srv := smtp.NewServer(s)
	srv.Domain = "127.0.0.1"
	if s.opts.STARTTLS {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{s.cert}}
	}
	srv.AllowInsecureAuth = !s.opts.STARTTLS
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	s.srv, s.ln = srv, ln
	go func() { _ = srv.Serve(ln) }()
}

// Stop closes the listener itself too: Serve may not have taken it yet.
func (s *Server) Stop() {
	_ = s.ln.Close()
	_ = s.srv.Close()
}

// Restart listens again on the same port after Stop.
func (s *Server) Restart() {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.serve(ln)
}

// FailWith makes DATA of the n-th message (from 1) fail with what fail
// returns, or succeed when it returns nil.
func (s *Server) FailWith(fail func(n int) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

// Messages are the accepted messages, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.received...)
}

// Subjects are the accepted messages' subjects, in order.
func (s *Server) Subjects() []string {
	var out []string
	for _, m := range s.Messages() {
		out = append(out, m.Header.Get("Subject"))
	}
	return out
}

// Connections counts the connections made so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// NewSession is called per connection, and again after STARTTLS.
func (s *Server) NewSession(c *smtp.Conn) (smtp.Session, error) {
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[*smtp.Conn]bool{}
	}
	s.conns[c] = true
	s.mu.Unlock()
	return &session{s: s}, nil
}

type session struct {
	s    *Server
	auth bool
	from string
	to   []string
}

func (ss *session) AuthMechanisms() []string {
	if ss.s.opts.User == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != ss.s.opts.User || pass != ss.s.opts.Password {
			return errors.New("invalid credentials")
		}
		ss.auth = true
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.s.opts.User != "" && !ss.auth {
		return smtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if strings.HasSuffix(to, "@invalid.example") {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s := ss.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.fail != nil {
		if err := s.fail(s.n); err != nil {
			return err
		}
	}
	m, err := mail.ReadMessage(strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	s.received = append(s.received, Message{Message: m, Raw: string(b), From: ss.from, To: ss.to})
	return nil
}

func (ss *session) Reset()        { ss.from, ss.to = "", nil }
func (ss *session) Logout() error { return nil }

func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}
