/**
 * The OTLP trace messages (opentelemetry-proto v1: common, resource, trace, collector/trace) and
 * google.rpc.Status, declared as protobuf descriptors for @bufbuild/protobuf, which does all the
 * binary and JSON decoding/encoding. Only the schema is written here, field for field as in the
 * .proto files; fields this server does not read (entity refs, profiles) are simply unknown to it and
 * skipped by the parser.
 */
import { createFileRegistry } from "@bufbuild/protobuf";
import type { DescMessage } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";

// google.protobuf.FieldDescriptorProto types and labels.
const T = {
  double: 1,
  int64: 3,
  int32: 5,
  fixed64: 6,
  fixed32: 7,
  bool: 8,
  string: 9,
  message: 11,
  bytes: 12,
  uint32: 13,
  enum: 14,
} as const;
type FieldType = keyof typeof T;
const OPTIONAL = 1;
const REPEATED = 3;

/** [name, number, type, typeName (for messages/enums), repeated?, oneofIndex?] */
type F = [string, number, FieldType, string?, boolean?, number?];

const msg = (name: string, fields: F[], extra: { oneofs?: string[]; enums?: { name: string; values: [string, number][] }[] } = {}) => ({
  name,
  field: fields.map(([fname, number, type, typeName, repeated, oneofIndex]) => ({
    name: fname,
    number,
    type: T[type],
    label: repeated ? REPEATED : OPTIONAL,
    ...(typeName ? { typeName } : {}),
    ...(oneofIndex !== undefined ? { oneofIndex } : {}),
    jsonName: fname.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
  })),
  oneofDecl: (extra.oneofs ?? []).map((n) => ({ name: n })),
  enumType: (extra.enums ?? []).map((e) => ({ name: e.name, value: e.values.map(([n, v]) => ({ name: n, number: v })) })),
});

const file = (name: string, pkg: string, deps: string[], messages: object[]): FileDescriptorProto =>
  create(FileDescriptorProtoSchema, { name, package: pkg, dependency: deps, syntax: "proto3", messageType: messages as never });

const C = ".opentelemetry.proto.common.v1";
const common = file(
  "opentelemetry/proto/common/v1/common.proto",
  "opentelemetry.proto.common.v1",
  [],
  [
    msg(
      "AnyValue",
      [
        ["string_value", 1, "string", undefined, false, 0],
        ["bool_value", 2, "bool", undefined, false, 0],
        ["int_value", 3, "int64", undefined, false, 0],
        ["double_value", 4, "double", undefined, false, 0],
        ["array_value", 5, "message", `${C}.ArrayValue`, false, 0],
        ["kvlist_value", 6, "message", `${C}.KeyValueList`, false, 0],
        ["bytes_value", 7, "bytes", undefined, false, 0],
      ],
      { oneofs: ["value"] },
    ),
    msg("ArrayValue", [["values", 1, "message", `${C}.AnyValue`, true]]),
    msg("KeyValueList", [["values", 1, "message", `${C}.KeyValue`, true]]),
    msg("KeyValue", [
      ["key", 1, "string"],
      ["value", 2, "message", `${C}.AnyValue`],
    ]),
    msg("InstrumentationScope", [
      ["name", 1, "string"],
      ["version", 2, "string"],
      ["attributes", 3, "message", `${C}.KeyValue`, true],
      ["dropped_attributes_count", 4, "uint32"],
    ]),
  ],
);

const resource = file(
  "opentelemetry/proto/resource/v1/resource.proto",
  "opentelemetry.proto.resource.v1",
  [common.name],
  [
    msg("Resource", [
      ["attributes", 1, "message", `${C}.KeyValue`, true],
      ["dropped_attributes_count", 2, "uint32"],
    ]),
  ],
);

const TR = ".opentelemetry.proto.trace.v1";
const trace = file(
  "opentelemetry/proto/trace/v1/trace.proto",
  "opentelemetry.proto.trace.v1",
  [common.name, resource.name],
  [
    msg("TracesData", [["resource_spans", 1, "message", `${TR}.ResourceSpans`, true]]),
    msg("ResourceSpans", [
      ["resource", 1, "message", ".opentelemetry.proto.resource.v1.Resource"],
      ["scope_spans", 2, "message", `${TR}.ScopeSpans`, true],
      ["schema_url", 3, "string"],
    ]),
    msg("ScopeSpans", [
      ["scope", 1, "message", `${C}.InstrumentationScope`],
      ["spans", 2, "message", `${TR}.Span`, true],
      ["schema_url", 3, "string"],
    ]),
    {
      ...msg(
        "Span",
        [
          ["trace_id", 1, "bytes"],
          ["span_id", 2, "bytes"],
          ["trace_state", 3, "string"],
          ["parent_span_id", 4, "bytes"],
          ["flags", 16, "fixed32"],
          ["name", 5, "string"],
          ["kind", 6, "enum", `${TR}.Span.SpanKind`],
          ["start_time_unix_nano", 7, "fixed64"],
          ["end_time_unix_nano", 8, "fixed64"],
          ["attributes", 9, "message", `${C}.KeyValue`, true],
          ["dropped_attributes_count", 10, "uint32"],
          ["events", 11, "message", `${TR}.Span.Event`, true],
          ["dropped_events_count", 12, "uint32"],
          ["links", 13, "message", `${TR}.Span.Link`, true],
          ["dropped_links_count", 14, "uint32"],
          ["status", 15, "message", `${TR}.Status`],
        ],
        {
          enums: [
            {
              name: "SpanKind",
              values: [
                ["SPAN_KIND_UNSPECIFIED", 0],
                ["SPAN_KIND_INTERNAL", 1],
                ["SPAN_KIND_SERVER", 2],
                ["SPAN_KIND_CLIENT", 3],
                ["SPAN_KIND_PRODUCER", 4],
                ["SPAN_KIND_CONSUMER", 5],
              ],
            },
          ],
        },
      ),
      nestedType: [
        msg("Event", [
          ["time_unix_nano", 1, "fixed64"],
          ["name", 2, "string"],
          ["attributes", 3, "message", `${C}.KeyValue`, true],
          ["dropped_attributes_count", 4, "uint32"],
        ]),
        msg("Link", [
          ["trace_id", 1, "bytes"],
          ["span_id", 2, "bytes"],
          ["trace_state", 3, "string"],
          ["attributes", 4, "message", `${C}.KeyValue`, true],
          ["dropped_attributes_count", 5, "uint32"],
          ["flags", 6, "fixed32"],
        ]),
      ],
    },
    msg(
      "Status",
      [
        ["message", 2, "string"],
        ["code", 3, "enum", `${TR}.Status.StatusCode`],
      ],
      {
        enums: [
          {
            name: "StatusCode",
            values: [
              ["STATUS_CODE_UNSET", 0],
              ["STATUS_CODE_OK", 1],
              ["STATUS_CODE_ERROR", 2],
            ],
          },
        ],
      },
    ),
  ],
);

const collector = file(
  "opentelemetry/proto/collector/trace/v1/trace_service.proto",
  "opentelemetry.proto.collector.trace.v1",
  [trace.name],
  [
    msg("ExportTraceServiceRequest", [["resource_spans", 1, "message", `${TR}.ResourceSpans`, true]]),
    msg("ExportTraceServiceResponse", [
      ["partial_success", 1, "message", ".opentelemetry.proto.collector.trace.v1.ExportTracePartialSuccess"],
    ]),
    msg("ExportTracePartialSuccess", [
      ["rejected_spans", 1, "int64"],
      ["error_message", 2, "string"],
    ]),
  ],
);

// google.rpc.Status without `details` (a repeated Any this server never sends).
const rpc = file(
  "google/rpc/status.proto",
  "google.rpc",
  [],
  [
    msg("Status", [
      ["code", 1, "int32"],
      ["message", 2, "string"],
    ]),
  ],
);

const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: [common, resource, trace, collector, rpc] }));

function message(name: string): DescMessage {
  const d = registry.getMessage(name);
  if (!d) throw new Error(`OTLP schema is missing ${name}`);
  return d;
}

export const ExportTraceServiceRequestSchema = message("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");
export const ExportTraceServiceResponseSchema = message("opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse");
export const RpcStatusSchema = message("google.rpc.Status");
