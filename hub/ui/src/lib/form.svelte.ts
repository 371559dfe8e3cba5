// One form's submit state: whether it is sending, the hub's last refusal, and where that refusal
// is shown (at its field, or in the form's own box). Pages keep their values; this keeps the rest.
import { errorId, fieldMessage, unplacedError } from './form';

export class FormState {
  busy = $state(false);
  error = $state<unknown>(null);

  /** `id` prefixes the ids of the error messages; `fields` are the fields the form shows errors at. */
  constructor(
    readonly id: string,
    readonly fields: readonly string[],
  ) {}

  /** Runs `action` as the form's submission: busy while it runs, its failure kept. `true` when it succeeded. */
  async run(action: () => Promise<unknown>): Promise<boolean> {
    this.busy = true;
    this.error = null;
    try {
      await action();
      return true;
    } catch (e) {
      this.error = e;
      return false;
    } finally {
      this.busy = false;
    }
  }

  /** The message shown at `field`, '' when the error is not about it. */
  fieldError(field: string): string {
    return fieldMessage(this.error, field);
  }

  /** The `aria-invalid` of `field`'s input. */
  invalid(field: string): 'true' | undefined {
    return this.fieldError(field) ? 'true' : undefined;
  }

  /** The `aria-describedby` of `field`'s input while its error shows. */
  describedBy(field: string): string | undefined {
    return this.fieldError(field) ? errorId(this.id, field) : undefined;
  }

  /** The error no field of the form shows. */
  get unplaced(): unknown {
    return unplacedError(this.error, this.fields);
  }

  reset(): void {
    this.error = null;
  }
}
