// The state of a page's calls to the API: a flag while one runs (aria-busy, disabled buttons,
// "Loading…") and the error of the last one that failed, for <ErrorNotice>.
import { ref, shallowRef, type Ref } from 'vue'

export interface ActionOptions {
  /** Hide the last error as soon as a new try starts (a form sent again). By default it stays
   *  until a try succeeds, so a list that reloads keeps its notice and does not announce it again. */
  clearErrorOnStart?: boolean
  /** Of runs that overlap, only the latest sets the flag and the error (a view whose inputs changed). */
  latestOnly?: boolean
  /** The flag, when it is shared with another action or does not start false. */
  busy?: Ref<boolean>
  /** The error, when one notice shows it for several actions. */
  error?: Ref<unknown>
}

export interface Action {
  busy: Ref<boolean>
  error: Ref<unknown>
  /** Runs `work` (told whether it is still the latest run); true when it succeeded. What it throws
   *  goes to `error`, not to the caller. */
  run: (work: (isLatest: () => boolean) => Promise<unknown>) => Promise<boolean>
}

export function useAction(options: ActionOptions = {}): Action {
  const busy = options.busy ?? ref(false)
  const error = options.error ?? shallowRef<unknown>(null)
  let latest = 0

  async function run(work: (isLatest: () => boolean) => Promise<unknown>): Promise<boolean> {
    const id = ++latest
    const isLatest = () => id === latest
    const reports = () => !options.latestOnly || isLatest()
    busy.value = true
    if (options.clearErrorOnStart) error.value = null
    try {
      await work(isLatest)
      if (reports()) error.value = null
      return true
    } catch (err) {
      if (reports()) error.value = err
      return false
    } finally {
      if (reports()) busy.value = false
    }
  }

  return { busy, error, run }
}
