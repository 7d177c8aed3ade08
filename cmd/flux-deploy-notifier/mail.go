package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	netmail "net/mail"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

// mailConfig is the mail part of serve's configuration.
type mailConfig struct {
	smtpAddr, smtpTLS, smtpAuth, smtpUser, smtpPasswordFile *string
	from, toList, dir, templatesDir, externalURL            *string
	alertAfter                                              *time.Duration

	to       []string
	password string
}

func (m *mailConfig) flags(f *flags) {
	m.smtpAddr = f.String("smtp-addr", "FDN_SMTP_ADDR", "", "SMTP server as host:port; without it mails are written to --mail-dir")
	m.smtpTLS = f.String("smtp-tls", "FDN_SMTP_TLS", "starttls", "starttls, tls or none")
	m.smtpAuth = f.String("smtp-auth", "FDN_SMTP_AUTH", "none", "plain, login, cram-md5 or none")
	m.smtpUser = f.String("smtp-username", "FDN_SMTP_USERNAME", "", "SMTP user name")
	m.smtpPasswordFile = f.String("smtp-password-file", "FDN_SMTP_PASSWORD_FILE", "", "file holding the SMTP password")
	m.from = f.String("mail-from", "FDN_MAIL_FROM", "flux-deploy-notifier@localhost", "sender address")
	m.toList = f.String("mail-to", "FDN_MAIL_TO", "", "recipients of every mail, as a@x,b@y; Alerts add more per layer with eventMetadata mail_to")
	m.dir = f.String("mail-dir", "FDN_MAIL_DIR", "", "without --smtp-addr, write each mail here as an .eml file (default <data-dir>/mail)")
	m.templatesDir = f.String("templates", "FDN_TEMPLATES", "", "directory with mail.txt.tmpl and mail.html.tmpl overriding the embedded templates")
	m.externalURL = f.String("external-url", "FDN_EXTERNAL_URL", "", "this service's URL as people reach it; mails link to the verdict")
	m.alertAfter = f.Duration("mail-alert-after", "FDN_MAIL_ALERT_AFTER", time.Hour, "a mail undelivered for longer is reported: a /readyz warning and fdn_mails_stuck")
}

// finish validates the mail flags once parsed; secrets come from files only.
func (m *mailConfig) finish(dataDir string) error {
	if _, err := netmail.ParseAddress(*m.from); err != nil {
		return fmt.Errorf("--mail-from %q: %w", *m.from, err)
	}
	for _, a := range rollout.ParseRecipients(*m.toList) {
		addr, err := netmail.ParseAddress(a)
		if err != nil {
			return fmt.Errorf("--mail-to %q: %w", a, err)
		}
		m.to = append(m.to, addr.Address)
	}
	if *m.alertAfter <= 0 {
		return fmt.Errorf("--mail-alert-after must be positive, got %s", *m.alertAfter)
	}
	if *m.dir == "" {
		*m.dir = filepath.Join(dataDir, "mail")
	}
	if *m.smtpAddr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(*m.smtpAddr); err != nil {
		return fmt.Errorf("--smtp-addr %q: %w", *m.smtpAddr, err)
	}
	if auth := strings.ToLower(*m.smtpAuth); auth != "none" && auth != "" {
		if *m.smtpUser == "" || *m.smtpPasswordFile == "" {
			return errors.New("--smtp-auth needs --smtp-username and --smtp-password-file")
		}
		pw, err := readSecret(*m.smtpPasswordFile)
		if err != nil {
			return fmt.Errorf("read SMTP password: %w", err)
		}
		m.password = pw
	}
	return nil
}

// dispatcher builds the sender the configuration asks for and the
// dispatcher that feeds it from the outbox.
func (m *mailConfig) dispatcher(db *store.DB, log *slog.Logger, reg prometheus.Registerer, stdout io.Writer) (*mail.Dispatcher, error) {
	var tmpl fs.FS = templates.FS
	if *m.templatesDir != "" {
		tmpl = os.DirFS(*m.templatesDir)
	}
	renderer, err := mail.NewRenderer(tmpl, *m.externalURL)
	if err != nil {
		return nil, err
	}
	var sender mail.Sender
	if *m.smtpAddr == "" {
		if sender, err = mail.NewDir(*m.dir, *m.from); err != nil {
			return nil, err
		}
		if len(m.to) > 0 {
			fmt.Fprintf(stdout, "no --smtp-addr: mails to %s are written to %s\n", strings.Join(m.to, ", "), *m.dir)
		}
	} else {
		host, portText, _ := net.SplitHostPort(*m.smtpAddr)
		port, err := strconv.Atoi(portText)
		if err != nil {
			return nil, fmt.Errorf("--smtp-addr port %q: %w", portText, err)
		}
		sender, err = mail.NewSMTP(mail.SMTPConfig{
			Host: host, Port: port, TLS: *m.smtpTLS, Auth: *m.smtpAuth,
			Username: *m.smtpUser, Password: m.password, From: *m.from, Timeout: 30 * time.Second,
		})
		if err != nil {
			return nil, err
		}
	}
	log.Info("mail", "smtp", *m.smtpAddr, "dir", *m.dir, "recipients", len(m.to))
	return mail.NewDispatcher(db, sender, renderer, log, time.Now, *m.alertAfter, reg), nil
}
