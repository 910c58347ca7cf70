"""The open-book tool agent ("Tool LM" of the TANQ paper): tools, a safe calculator, the bounded loop."""
