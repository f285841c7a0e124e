// Package config decodes the gateway's HCL file into typed options for the
// other packages, and reports every problem with its file, line and column.
// Nothing outside this package reads HCL.
package config
