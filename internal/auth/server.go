package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerOptions reads the server side of what Init wrote to dir (the
// accounts and users of auth.conf, and the TLS of tls.conf when it turns
// TLS on) into opts, for an embedded server: the same configuration a
// nats-server gets by including the two files.
func ServerOptions(dir string, opts *server.Options) error {
	accounts, err := server.ProcessConfigFile(filepath.Join(dir, AccountsFile))
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if len(accounts.Nkeys) == 0 && len(accounts.Users) == 0 {
		return fmt.Errorf("auth: %s defines no users", filepath.Join(dir, AccountsFile))
	}
	opts.Accounts, opts.Nkeys, opts.Users = accounts.Accounts, accounts.Nkeys, accounts.Users
	tlsPath := filepath.Join(dir, TLSConfFile)
	if _, err := os.Stat(tlsPath); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	t, err := server.ProcessConfigFile(tlsPath)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if t.TLSConfig != nil {
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = t.TLS, t.TLSConfig, t.TLSTimeout
	}
	return nil
}
