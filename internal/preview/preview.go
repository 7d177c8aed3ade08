// Package preview takes screenshots with headless Chromium, for the
// previews people look at (make mail-preview, make ui-preview).
package preview

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// Screenshot renders url in headless chromium at width × height px and
// writes png; dark asks for the dark color scheme.
func Screenshot(chromium, url, png string, width, height int, dark bool) error {
	profile, err := os.MkdirTemp("", "fdn-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir=" + profile,
		"--window-size=" + strconv.Itoa(width) + "," + strconv.Itoa(height), "--screenshot=" + png,
	}
	if dark {
		args = append(args, "--force-dark-mode", "--blink-settings=preferredColorScheme=0")
	}
	cmd := exec.Command(chromium, append(args, url)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chromium screenshot of %s: %v\n%s", url, err, out)
	}
	return nil
}
