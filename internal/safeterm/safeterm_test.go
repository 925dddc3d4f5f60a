package safeterm

import (
	"bytes"
	"testing"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain text is unchanged", "refund 8240 to cus_1\n\tdone", "refund 8240 to cus_1\n\tdone"},
		{"unicode is kept", "café → ok", "café → ok"},
		{"colour", "\x1b[31mred\x1b[0m text", "red text"},
		{"cursor up and erase line", "approved\x1b[1A\x1b[2K\x1b[1;32mok", "approvedok"},
		{"window title by OSC with BEL", "a\x1b]0;pwned\x07b", "ab"},
		{"hyperlink by OSC with ST", "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "click"},
		{"DCS string", "x\x1bPq#0;2;0;0;0\x1b\\y", "xy"},
		{"two-character escapes", "\x1b7saved\x1b8\x1bc", "saved"},
		{"charset designation", "\x1b(Bt", "t"},
		{"8-bit CSI", "a\u009b2Jb", "ab"},
		{"8-bit OSC ended by 8-bit ST", "a\u009d0;t\u009cb", "ab"},
		{"carriage return rewrites the line", "amount 99999999\ramount 1", "amount 99999999amount 1"},
		{"backspace, bell, NUL, DEL", "a\bb\x07c\x00d\x7fe", "abcde"},
		{"bidi override", "pay \u202eevil\u202c now", "pay evil now"},
		{"unterminated CSI at the end", "ok\x1b[12", "ok"},
		{"lone ESC at the end", "ok\x1b", "ok"},
		{"invalid UTF-8", "a\xffb", "a\ufffdb"},
		{"CSI broken by a newline keeps the newline", "a\x1b[1\nb", "a\nb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Clean(tc.in); got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestWriter_cleansEachWriteAndReportsTheInputLength(t *testing.T) {
	var buf bytes.Buffer
	w := Writer(&buf)
	in := []byte("tool said \x1b[2Jhello\n")
	n, err := w.Write(in)
	if err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(in))
	}
	if got, want := buf.String(), "tool said hello\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}
