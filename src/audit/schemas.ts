import Type from 'typebox'

const NullableString = Type.Union([Type.String(), Type.Null()])

/** One audit event as the admin API and the data export show it. */
export const AuditEvent = Type.Object({
  id: Type.String({ format: 'uuid' }),
  at: Type.String({ format: 'date-time' }),
  type: Type.String(),
  user_id: NullableString,
  actor: Type.Union([Type.String(), Type.Null()], { description: '`api_key:<id>` or `cli` when an operator acted; null when the user did' }),
  reason: NullableString,
  ip: NullableString,
  user_agent: NullableString,
  request_id: NullableString,
})
