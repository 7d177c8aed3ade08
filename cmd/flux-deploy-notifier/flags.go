package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// flags is a FlagSet whose every flag also reads an FDN_* environment
// variable; a flag given on the command line wins over the environment.
type flags struct {
	*flag.FlagSet
	getenv func(string) string
	errs   []error
}

func newFlags(name string, getenv func(string) string, out io.Writer) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &flags{FlagSet: fs, getenv: getenv}
}

func (f *flags) env(name, env string) (string, bool) {
	v := f.getenv(env)
	return v, v != ""
}

func (f *flags) String(name, env, def, usage string) *string {
	if v, ok := f.env(name, env); ok {
		def = v
	}
	return f.FlagSet.String(name, def, usage+" ("+env+")")
}

func (f *flags) Bool(name, env string, def bool, usage string) *bool {
	if v, ok := f.env(name, env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %q is not a boolean", env, v))
		}
		def = b
	}
	return f.FlagSet.Bool(name, def, usage+" ("+env+")")
}

func (f *flags) Duration(name, env string, def time.Duration, usage string) *time.Duration {
	if v, ok := f.env(name, env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %q is not a duration", env, v))
		}
		def = d
	}
	return f.FlagSet.Duration(name, def, usage+" ("+env+")")
}

// DurationAlias is a deprecated name of the duration flag of, setting the
// same value: on the command line where it stands among the flags, and from
// its variable when of's is not set.
func (f *flags) DurationAlias(name, env, of, ofEnv string, p *time.Duration) {
	if v, ok := f.env(name, env); ok {
		if _, set := f.env(of, ofEnv); !set {
			d, err := time.ParseDuration(v)
			if err != nil {
				f.errs = append(f.errs, fmt.Errorf("%s: %q is not a duration", env, v))
			}
			*p = d
		}
	}
	f.FlagSet.Var((*durationValue)(p), name, "deprecated: the same as --"+of+" ("+env+")")
}

// durationValue is a time.Duration as a flag.Value, for a flag that sets
// another's variable.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("parse error")
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// parse parses args and reports environment errors first, since they were
// found first.
func (f *flags) parse(args []string) error {
	if len(f.errs) > 0 {
		return f.errs[0]
	}
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	return nil
}

func (f *flags) Int(name, env string, def int, usage string) *int {
	if v, ok := f.env(name, env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %q is not a number", env, v))
		}
		def = n
	}
	return f.FlagSet.Int(name, def, usage+" ("+env+")")
}

// readSecret reads a secret that will travel in a header or a protocol
// line: the file's trailing line break (the usual Secret) is not part of it.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}
