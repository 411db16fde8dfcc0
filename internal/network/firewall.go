package network

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// VethPrefix starts the name of every sandbox's host-side veth.
const VethPrefix = "wv-"

// Firewall is the daemon's nftables table. It keeps every sandbox to the
// agent channel: a sandbox may answer connections the host opens to it, and
// nothing else: it cannot open connections to the host (the daemon's API, the
// host's other services) nor, through the host, to other sandboxes or the
// outside. Rules sit in the host namespace, on the veths: rules inside the
// sandbox's namespace would never match, since runsc's network stack handles
// its packets.
type Firewall struct {
	Table string
}

// Ensure creates or replaces the table's rules.
func (f Firewall) Ensure() error {
	rules := fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	chain input {
		type filter hook input priority filter - 5; policy accept;
		iifname "%[2]s*" ct state established,related accept
		iifname "%[2]s*" counter drop
	}
	chain forward {
		type filter hook forward priority filter - 5; policy accept;
		iifname "%[2]s*" counter drop
		oifname "%[2]s*" counter drop
	}
}
`, f.Table, VethPrefix)
	return nft(rules)
}

// Remove deletes the table; a table that is not there is fine.
func (f Firewall) Remove() error {
	err := nft(fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\n", f.Table))
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return nil
	}
	return err
}

func nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %w: %s (is the nftables package installed? scripts/up.sh installs it)", err, strings.TrimSpace(out.String()))
	}
	return nil
}
