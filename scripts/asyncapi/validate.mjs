// Validates AsyncAPI documents with the AsyncAPI parser (and its Avro schema
// parser, so the Avro payloads are parsed too, not only carried).
// Usage: node validate.mjs FILE...   Prints one JSON line per file:
// {"file", "errors", "warnings", "channels", "operations", "messages"};
// exits 1 if any document has an error.
import { readFile } from 'node:fs/promises';
import { Parser } from '@asyncapi/parser';
import { AvroSchemaParser } from '@asyncapi/avro-schema-parser';

const ERROR = 0;
const WARNING = 1;

const parser = new Parser();
parser.registerSchemaParser(AvroSchemaParser());

let failed = false;
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node validate.mjs FILE...');
  process.exit(2);
}
for (const file of files) {
  const text = await readFile(file, 'utf8');
  const { document, diagnostics } = await parser.parse(text, { source: file });
  const describe = (d) => `${d.path.join('.') || '(root)'}: ${d.message}`;
  const errors = diagnostics.filter((d) => d.severity === ERROR).map(describe);
  const warnings = diagnostics.filter((d) => d.severity === WARNING).map(describe);
  const summary = { file, errors, warnings, channels: [], operations: [], messages: [] };
  if (document) {
    summary.channels = document.channels().all().map((c) => c.address());
    summary.operations = document.operations().all().map((o) => `${o.action()} ${o.id()}`);
    summary.messages = document.messages().all().map((m) => ({
      id: m.id(),
      schemaFormat: m.schemaFormat(),
      payloadFields: Object.keys(m.payload()?.properties() ?? {}),
      headers: Object.keys(m.headers()?.properties() ?? {}),
    }));
  }
  if (errors.length > 0 || !document) failed = true;
  console.log(JSON.stringify(summary));
}
process.exit(failed ? 1 : 0);
