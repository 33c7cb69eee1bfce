// A page that shows a list kept live: loaded when it mounts, loaded again (debounced) after the
// stream events that may change it, and after a stream reset.
import { onMounted, onUnmounted } from 'vue'
import { stream, type StreamEvent } from './stream'

export function useLiveReload(
  types: string | readonly string[],
  load: () => unknown,
  options: { delayMs?: number; skip?: (event: StreamEvent) => boolean } = {},
): void {
  const { delayMs = 300, skip = () => false } = options
  let timer: ReturnType<typeof setTimeout> | undefined
  const offs: (() => void)[] = []
  onMounted(() => {
    void load()
    offs.push(
      stream.on(types, (event) => {
        if (skip(event)) return // e.g. a form is open: do not pull the list from under it
        clearTimeout(timer)
        timer = setTimeout(() => void load(), delayMs)
      }),
      stream.onReset(() => void load()),
    )
  })
  onUnmounted(() => {
    offs.forEach((off) => off())
    clearTimeout(timer)
  })
}
