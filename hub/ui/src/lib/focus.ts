// Keyboard focus when part of a page opens or closes: a form that opens takes focus on its first
// control, and focus goes back to what opened it when it closes, so a keyboard user is never left
// on a control that is gone.
import { tick } from 'svelte';

/** After the next render, focuses the first enabled control inside the element `selector` names. */
export async function focusInto(selector: string): Promise<void> {
  await tick();
  document.querySelector<HTMLElement>(`${selector} :is(input, select, textarea, button):not([disabled])`)?.focus();
}

/** After the next render, focuses the element `get` returns then (one that may be rendered anew). */
export async function focusBack(get: () => HTMLElement | undefined): Promise<void> {
  await tick();
  get()?.focus();
}
