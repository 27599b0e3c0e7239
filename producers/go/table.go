package outbox

import "fmt"

// DefaultTable is the outbox table's name unless New is given another.
const DefaultTable = "room_outbox"

// maxTableNameBytes is the longest table name accepted.
const maxTableNameBytes = 48

// checkTableName returns an error unless name is a plain SQL identifier
// ([A-Za-z_][A-Za-z0-9_]*, at most 48 bytes, as the host allows: it derives index names from it): the statements name the table unquoted.
func checkTableName(name string) error {
	ok := name != "" && len(name) <= maxTableNameBytes
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		ok = letter || (i > 0 && c >= '0' && c <= '9')
	}
	if !ok {
		return fmt.Errorf("outbox: table name %q is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)", name, maxTableNameBytes)
	}
	return nil
}
