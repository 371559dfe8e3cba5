// The rules every form shares: which field the hub's error is about (a 422's `field`), the message
// shown at that field, and the error left for the form's own box when no field shown takes it.
import { ApiError } from './api/client';

/** Whether the hub's `errorField` is `field` or lies under it (`duration.steps` and
 * `jails[1]` lie under `duration` and `jails`). */
export function fieldMatches(errorField: string | undefined, field: string): boolean {
  if (!errorField) return false;
  return errorField === field || errorField.startsWith(`${field}.`) || errorField.startsWith(`${field}[`);
}

/** The message of `error` when it is about `field`, else ''. A refusal by the lockout guard also
 * names the entry that protects the address. */
export function fieldMessage(error: unknown, field: string): string {
  if (!(error instanceof ApiError) || !fieldMatches(error.field, field)) return '';
  const by = error.protectedBy;
  if (!by || error.message.includes(by.network)) return error.message;
  return `${error.message} (protected by ${by.network}${by.note ? `: ${by.note}` : ''})`;
}

/** `error`, unless one of the form's `fields` shows it; then `null`, so it is said once. */
export function unplacedError(error: unknown, fields: readonly string[]): unknown {
  if (error instanceof ApiError && fields.some((f) => fieldMatches(error.field, f))) return null;
  return error;
}

/** The element id of a field's error message, for the input's `aria-describedby`. */
export function errorId(form: string, field: string): string {
  return `${form}-${field.replace(/[^A-Za-z0-9_-]/g, '-')}-error`;
}
