package mail_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// smtpServer is a real SMTP server on loopback: STARTTLS with a self-signed
// certificate and AUTH PLAIN, recording what it accepts.
type smtpServer struct {
	t         *testing.T
	addr      string
	port      int
	clientTLS *tls.Config
	srv       *smtp.Server
	ln        net.Listener
	cert      tls.Certificate

	mu       sync.Mutex
	received []*mail.Message
	raw      []string
	conns    map[*smtp.Conn]bool
	// fail, when set, answers DATA for the n-th message (from 1) with an
	// error, or nil to accept.
	fail func(n int) error
	n    int
}

const (
	smtpUser = "flux"
	smtpPass = "s3cret-p4ss"
)

func newSMTPServer(t *testing.T) *smtpServer {
	t.Helper()
	cert, pool := selfSigned(t)
	s := &smtpServer{t: t, cert: cert, clientTLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.port = ln.Addr().(*net.TCPAddr).Port
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *smtpServer) serve(ln net.Listener) {
	srv := smtp.NewServer(s)
	srv.Domain = "127.0.0.1"
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{s.cert}}
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	s.srv, s.ln = srv, ln
	go func() { _ = srv.Serve(ln) }()
}

// stop closes the listener itself too: Serve may not have taken it yet.
func (s *smtpServer) stop() {
	_ = s.ln.Close()
	_ = s.srv.Close()
}

// restart listens again on the same port after stop.
func (s *smtpServer) restart() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.serve(ln)
}

func (s *smtpServer) messages() []*mail.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*mail.Message(nil), s.received...)
}

func (s *smtpServer) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

var (
	smtpError451 = smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	smtpError554 = smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "message refused"}
)

func (s *smtpServer) subjects() []string {
	var out []string
	for _, m := range s.messages() {
		out = append(out, m.Header.Get("Subject"))
	}
	return out
}

// NewSession is called per connection, and again after STARTTLS.
func (s *smtpServer) NewSession(c *smtp.Conn) (smtp.Session, error) {
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[*smtp.Conn]bool{}
	}
	s.conns[c] = true
	s.mu.Unlock()
	return &session{s: s}, nil
}

type session struct {
	s    *smtpServer
	auth bool
}

func (ss *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != smtpUser || pass != smtpPass {
			return errors.New("invalid credentials")
		}
		ss.auth = true
		return nil
	}), nil
}

func (ss *session) Mail(string, *smtp.MailOptions) error {
	if !ss.auth {
		return smtp.ErrAuthRequired
	}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if strings.HasSuffix(to, "@invalid.example") {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}
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
	s.received = append(s.received, m)
	s.raw = append(s.raw, string(b))
	return nil
}

func (s *smtpServer) rawMessages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.raw...)
}

func (ss *session) Reset()        {}
func (ss *session) Logout() error { return nil }

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
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
